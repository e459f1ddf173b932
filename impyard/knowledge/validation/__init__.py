"""Records and their validation: record paths and frontmatter, citations and provenance, the
rules a path breaks by its name, names that clash, repository sizes, what a run's change is
checked against (``validate``), what landed since its base. Imports ``store`` and
``change`` (and the catalogue, ``imps``).
"""
