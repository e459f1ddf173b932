"""Where a run's work meets the imp's lane while its box runs and at its exit:
checkpoints landed, their trailers and receipts (``landing``), what the box may ask of
its host through its gateway (``control``), and the task a tainted run files for a clean
one (``bridge``).

It may import ``runs.records`` and ``runs.provision`` (the clean room's rules); it knows
neither the pipeline that drives a run nor the ready boxes.
"""
