"""The control plane's side of the cluster, inside ``impyard serve``.

    registry    the nodes as they report themselves, drained or not; ``nodes.json``
    leases      each remote run's lease: its node, fencing token, files, output, result
    hub         placement and the waits of remote runs; what the API calls
    api         the cluster API (HTTP, bearer token) node agents talk to
    relay       one box connection relayed from a node into the run's gateway
    remote_run  a run whose box runs on a node: the pipeline's run with the box elsewhere
    token       the cluster token: made once, kept 0600 in the data root

May import: ``impyard.cluster.protocol``/``treetar``, runs, box (specs), gateway, policy.
Never ``impyard.cluster.node``.
"""
