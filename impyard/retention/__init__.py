"""Retention: what a data root keeps, and for how long (``impyard gc``, serve's periodic gc).

``plan`` works out what the org ``[retention]`` policy lets go, as data (each item with
its kind, id, age and reason); ``apply`` removes exactly that, re-checking each item
as it goes, and journals every removal. A dry run is the plan alone.
"""
