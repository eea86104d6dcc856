"""Semantic cores shared by every executor: acker, coordination, bolt runners.

The acker and the coordination tracker are pure state machines (events in,
decisions out, time passed in), tested by exact traces.
"""
