"""Evaluation of recall quality: LoCoMo and the facts-that-change cases through the real stores.

- `locomo`: the data set, its held-out splits and the scoring (pure, plus file loading);
  `extracted`, `product`: what the pipeline-driven units score and report.
- `options`: what a run is asked to do (`EvalOptions`) and its defaults.
- `units`: observations and dialog turns as memories (keys, key context, embeddings).
- `cache`: embeddings kept between runs (`CachingEmbedder`, a NumPy `.npz` read without pickle).
- `stores`: the fresh SQLite or Postgres store a run writes into.
- `runner`: `run_locomo`, one run end to end; `product_run`: the product unit's conversations.
- `checkpoint`: finished conversations of an `extracted` run, to resume it.
- `report`: the `--json` document and the table; `progress`: the progress bar.

`pmem eval locomo` (`cli.commands.evaluate`) is the command line over `runner`; the scripts in
`bench/` import these modules."""
