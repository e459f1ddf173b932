"""What a request may reach and spend: the rules' verdict (``rules``), the address
guard (``address``) and the host-side connections it holds to (``upstream``), the run's
and imp's budgets (``budget``), request bodies held to their caps (``upload``), and what
one request leaves in the journal or the refusal that ends it (``outcome``).

It may import ``impyard.gateway.errors``, policy's models and the shared leaves; no other
part of ``gateway``.
"""
