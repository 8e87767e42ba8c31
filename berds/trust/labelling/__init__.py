"""Human labels for a judge's pairs: ``berds label sample | serve | status | export | import``.

* ``task``: draw whole questions at random (seeded) from evaluated runs and write a task folder;
* ``store``: the labels in SQLite, one row per (pair, annotator), written as they are given;
* ``server``: the labelling page in the browser (Starlette + uvicorn, 127.0.0.1);
* ``export``: the labelled-pairs TSV ``berds judge validate`` and ``berds eval --labels`` read, Label Studio
  JSON both ways, status and Cohen's κ between annotators.

docs/labelling.md walks through it.
"""

from berds.trust.labelling.export import (
    CONFLICT_POLICIES,
    export_label_studio,
    export_tsv,
    import_label_studio,
    import_tsv,
    task_status,
)
from berds.trust.labelling.store import LabelStore
from berds.trust.labelling.task import LabelTask, open_task, read_evaluation, sample_task

__all__ = ["CONFLICT_POLICIES", "LabelStore", "LabelTask", "export_label_studio", "export_tsv", "import_label_studio",
           "import_tsv", "open_task", "read_evaluation", "sample_task", "task_status"]
