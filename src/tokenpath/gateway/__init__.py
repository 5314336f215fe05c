"""tokenpath gateway: a streaming OpenAI gateway that adds (almost) nothing to a token stream."""
