"""The DRPC server: Storm-compatible Thrift (3772/3773) and HTTP (3774) front ends."""
