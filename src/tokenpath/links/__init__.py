"""Realistic links on one host: network namespaces joined by a veth pair."""
