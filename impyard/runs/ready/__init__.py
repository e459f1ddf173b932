"""Ready boxes: pool boxes started before their run, each claimed by exactly one run.

``pool`` starts, lists and drains them (serve's ``warmfill`` keeps them filled);
``claim`` is a run taking one (the pipeline's only entry here); ``gate`` is the script a
ready box waits at until it is claimed; ``prefill`` copies an imp's main into a ready
box before any run asks. It may import the box launcher, knowledge's checkouts and the
run's own records; the pipeline reaches it only through ``claim``.
"""
