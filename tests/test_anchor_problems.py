"""The panel's Problems list shows the stale code anchors the last recorded check found
(services/code/check.stale_summary; issue 19 §3, issue 20's Overview), read from the store —
the page never runs git — and only those of projects the viewer may read."""

from __future__ import annotations

from code_repos import JOBS, jobs_repo
from cuba_memorys.services.code import check
from cuba_memorys.services.graph import projects
from cuba_memorys.services.observations import write
from test_panel import panel


def test_the_overview_lists_the_stale_anchors_of_the_last_recorded_check(open_memory, tmp_path):
    repo = jobs_repo(tmp_path / "repo")
    mem = open_memory(embed_model="none", code_root=repo.root, panel=True)
    projects.switch(mem, None, name="alpha")
    write.add(mem, None, entity_name="jobs", content="parse_config silently drops unknown keys",
              anchors=[{"path": "jobs.py", "symbol": "parse_config"}])
    write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
              anchors=[{"path": "jobs.py", "symbol": "retry"}])
    projects.switch(mem, None, name="*")
    with panel(mem) as client:
        assert 'id="stale-anchors"' not in client.get("/panel").text  # nothing stale: no line

    repo.write("jobs.py", JOBS.replace('keys[name.strip()] = value.strip()', 'keys[name] = value'))
    repo.commit("parse_config keeps spaces")
    with panel(mem) as client:
        assert 'id="stale-anchors"' not in client.get("/panel").text  # not recorded yet: the page runs no git
    assert check.check_all(mem, None, record=True)["stale_count"] == 1
    assert check.stale_summary(mem, None)["count"] == 1
    with panel(mem) as client:
        page = client.get("/panel").text
    assert 'id="stale-anchors">stale code anchors: 1' in page

    projects.switch(mem, None, name="beta")  # another project's scope sees none of alpha's
    assert check.stale_summary(mem, None)["count"] == 0
