__all__ = ['ttypes', 'constants', 'DistributedRPC', 'DistributedRPCInvocations']
