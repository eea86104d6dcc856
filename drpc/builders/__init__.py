"""Topology builders: linear DRPC (and transactional topologies)."""
