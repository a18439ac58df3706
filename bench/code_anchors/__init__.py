"""The code-anchor benchmark (issue 19): a set built from this repository's own git history
(build_set.py) and the run that scores diff-seeded recall and the freshness flag on it (run.py).

    .venv/bin/python -m bench.code_anchors.build_set            # writes bench/results/code_anchors/set.json
    .venv/bin/python -m bench.code_anchors.run                  # reads it, prints and writes the figures
"""
