"""A dataset module as a user adds one (docs/ARCHITECTURE.md, "How to add a dataset"): its loader, its preparation
(the shared pipeline: quarantine, gold check, held-out split) and its registry entry. The tests register it for a
while (``register_dataset(TOY)``); a real one is one line in ``pc_pipelines/data/registry.py``'s ``_REGISTERED``."""

from pc_pipelines.data.prepare import parse_number, prepare_rows
from pc_pipelines.data.readers import load_table
from pc_pipelines.data.spec import DatasetSpec

COLUMNS = ("question", "answer")


def load(path):
    """The rows of a local JSONL / Parquet copy (``DataResource.toy_path``)."""
    return load_table(path, columns=COLUMNS, required=COLUMNS, what="Toy", setting="toy_path")


def prepare(table, heldout=2, seed=0, grader=None, *, gold_workers=None):
    n = table.num_rows
    return prepare_rows("toy", table.column("question").to_pylist(), table.column("answer").to_pylist(), [None] * n,
                        parse_number, drop_binary=False, heldout=heldout, seed=seed, grader=grader,
                        gold_workers=gold_workers)


TOY = DatasetSpec("toy", "Toy", "Additions written out in words, as a test's dataset.", load=load, prepare=prepare,
                  heldout=2)
