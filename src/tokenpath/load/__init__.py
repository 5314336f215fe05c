"""The added-TTFT benchmark under load (the first seed article): closed-loop streams through a target, joined to the
stub's write log, with the proxy's CPU and memory sampled."""
