"""Storm's DRPC wire protocol: what the server, the clients and the remote runner speak.

- ``wire``: Thrift framed binary, the two services' calls encoded and decoded;
- ``scan``: a bounded pre-scan of a Thrift message (string, container and
  nesting limits) before anything is decoded;
- ``tls``: TLS settings and contexts, and a peer certificate's user name;
- ``gen``: the bindings the Thrift compiler makes from ``thrift/drpc.thrift``
  (``make thrift``).

The engine (executors, transactional runs, state) never imports this package.
"""
