"""DRPC clients: ``DRPCClient``, ``AsyncDRPCClient``, ``DRPCInvocationsClient``."""
