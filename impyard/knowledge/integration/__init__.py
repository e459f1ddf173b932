"""The lane: one per imp, serialized; a change validated, queued, replayed onto main and
published to the read-only origin, or kept off main (candidates, quarantine); bulk
deletions held for the owner. The top of knowledge: imports every other part.
"""
