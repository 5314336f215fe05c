"""One stream at a time through a raw socket: every read timestamped, every frame counted."""
