"""simsci.train: the one training loop every simsci model uses.

    config = TrainConfig(epochs=20, lr=1e-3, schedule="cosine", early_stopping=True)
    summary = Trainer(model, config, train_set, val_set, out_dir="runs/x").fit()
    model = load_model("runs/x/checkpoints/best.pt")

Model contract
--------------
A model is a ``torch.nn.Module`` with

- ``training_step(batch) -> dict``: ``"loss"``, a scalar tensor to minimise (a mean over
  the batch's samples), plus any other scalar metrics (tensors or floats). Names ``step``,
  ``epoch``, ``split``, ``lr``, ``time`` and ``grad_norm`` are reserved.
- optional ``validation_step(batch) -> dict`` of scalar metrics; without it validation
  calls ``training_step``. Either runs under ``torch.no_grad()`` with ``model.eval()``.
  Validation metrics are logged as ``val_<name>`` and averaged over samples (batch means
  weighted by batch size, across all processes under DDP).
- ``init_args``: a JSON-able dict of its constructor arguments, so a checkpoint can
  rebuild it as ``Class(**init_args)``; the class must be importable (module level).

Batches come from a DataLoader over a map-style Dataset with the given ``collate_fn``;
the trainer moves the tensors in a batch (nested in dicts, lists, tuples; objects with a
``.to`` method such as torch_geometric batches) to the device before calling the model.
The model's own randomness (dropout, reparameterisation noise) should use the global
torch RNG, whose state checkpoints save and restore.

Data order and DDP
------------------
Epoch e's order is a permutation drawn from a generator seeded by (seed, e), so a killed
run resumed with ``resume=True`` ends with bit-for-bit the same parameters and metrics
as an uninterrupted run (with ``num_workers > 0`` this holds as long as the dataset's
own ``__getitem__`` is not random; with ``num_workers=0`` it holds regardless, and on CUDA
it needs ``deterministic=True``). Under torchrun (``WORLD_SIZE > 1``) the Trainer runs
DistributedDataParallel: ``batch_size`` is PER PROCESS, each step's global batch of
``batch_size * world_size`` samples is the concatenation of the ranks' batches (so it
equals a single-process run with the larger batch), validation is sharded and reduced,
and only rank 0 writes files.

Seeding and the training length
-------------------------------
Same seed, same data, same device and thread count: bit-identical results. Every
training entry calls ``seed_everything(seed)`` once, at its start, before it loads data
that draws, builds the model and starts the Trainer (a model built before the seed is
set starts from other weights on every run); ``fit`` seeds again (or restores a resumed
run's RNG states). ``TrainConfig.max_steps`` is a budget that is honoured: with
``max_steps`` given and ``epochs`` left at None the epochs are unbounded; without
``max_steps``, ``epochs`` defaults to 10; with both, the run stops at the first reached,
and the Trainer warns at the start when ``epochs`` stops the run before ``max_steps``.

Files under ``out_dir``: ``checkpoints/last.pt``, ``checkpoints/best.pt`` (at each new
best of ``config.monitor``; a run that ends without one -- no validation data, no
evaluation within its steps, or only non-finite values -- writes its final state there,
so best.pt exists whenever a run has ended), ``metrics.jsonl``, ``metrics.csv``,
``summary.json``, and ``tensorboard/`` when asked for. Checkpoints are written atomically
and load with ``torch.load(weights_only=True)``; they hold ``format_version``, the
model's import path and ``init_args``, model/optimizer/scheduler state, step, epoch,
position inside the epoch, early-stopping state, the config, every rank's RNG states and
the versions.
``import_model_class("module:qualname")`` returns the class such an import path names
(what ``load_model`` rebuilds; wrappers that store their inner module's path use it too);
``save_checkpoint(path, payload)`` writes any checkpoint dict atomically.
``export_model(checkpoint_or_model, out_dir)`` writes a trained model as files that run
with plain torch, without simsci: a ``torch.export`` program (TorchScript where
``torch.export`` cannot trace it), the weights as safetensors, an example and a
manifest (``simsci export CKPT --out DIR``; see :mod:`simsci.train._export`).
"""

from simsci.train._checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    TrainingError,
    import_model_class,
    load_checkpoint,
    load_model,
    save_checkpoint,
    save_model,
)
from simsci.train._config import TrainConfig
from simsci.train._export import export_model
from simsci.train._sampler import EpochBatchSampler
from simsci.train._seed import seed_everything
from simsci.train._trainer import Trainer, evaluate

__all__ = [
    "TrainConfig",
    "Trainer",
    "evaluate",
    "load_checkpoint",
    "load_model",
    "save_model",
    "save_checkpoint",
    "import_model_class",
    "export_model",
    "EpochBatchSampler",
    "seed_everything",
    "CheckpointError",
    "TrainingError",
    "FORMAT_VERSION",
]
