"""Experiments: conditions x paths x runs, declared in a file before the run, certified, with exclusions."""
