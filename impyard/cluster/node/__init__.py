"""The node agent (``impyard node``), run by Swarm on every node of the cluster.

    client   the cluster API as the node sees it (token, agent id, bounded answers)
    relay    the listener in a box's network namespace; each connection relayed to the
             control plane, where the run's gateway serves it
    boxrun   one leased run: its files, its box on this node's engine, output, result
    agent    the loop: heartbeats, leases within capacity, leftovers swept at start

May import: ``impyard.cluster.protocol``/``treetar``, box (launch, specs, logs), gateway's
netns and box-side helpers. Never ``impyard.cluster.plane``, runs, knowledge or a data root:
a node holds no knowledge and no secret but the cluster token.
"""
