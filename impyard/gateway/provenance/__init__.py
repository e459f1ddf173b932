"""What the gateway keeps of what a box fetched: fetch receipts (``receipts``), the
relay of one response that writes them (``fetch``) and hashes its body (``digest``), and
the opt-in source archive of bodies by SHA-256 (``archive``, ``archive_intake``).

It imports no other part of ``gateway``; knowledge's provenance check and the CLI read
receipts here.
"""
