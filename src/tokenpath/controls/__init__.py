"""Known-behaviour relays the instrument must see before anything it reports counts."""
