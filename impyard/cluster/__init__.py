"""Runs on the nodes of a Docker Swarm: one control plane, a node agent on every node.

    protocol   what the control plane and a node agent say to each other (typed)
    treetar    a run's tree as a tar: packed on the node, unpacked on the control plane
               under the rules for trees from outside
    deploy     the node agent as a Swarm global service, its token as a Swarm secret
    plane/     the control plane's side, inside ``impyard serve``: node registry, leases
               with fencing tokens, placement, the cluster API, the remote run
    node/      the node agent (``impyard node``): leases runs, starts their boxes on its own
               engine, relays each box's gateway connections, returns the tree

The node side never imports the control plane's side, and neither reads the other's files:
everything between them crosses the cluster API, authenticated by the cluster token.
"""
