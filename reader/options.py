"""``ReadOptions``: how ``reader.load`` reads a split, as one value.

``reader.load(path, split=..., batch_size=..., seed=...)`` builds one from its
keywords; ``reader.load(path, options=ReadOptions(...))`` takes one whole (keywords
given as well change its fields). Each field is described in ``reader.load``'s
docstring. Checked when made: the errors come before any file is read. Imports
neither TensorFlow nor Beam.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Optional, Union


from dcm2tfrecord.reader.shard_cache import check_options as check_local_cache

_INT64_MAX = (1 << 63) - 1


def check_start_step(start_step: Any, batch_size: int = 1, repeat: Union[bool, int] = False) -> int:
    """``start_step`` as an int >= 0, checked before any TensorFlow op sees it.

    tf.data counts the epochs before it in 64 bits: with ``repeat=True`` the records before
    it, ``start_step * batch_size``, must stay below 2**63 - 1; otherwise the epochs up to the
    end of its pass, at most ``(start_step + 1) * repeat``, within 2**63 - 1. (Where a pass
    holds more than one step the bound is loose: it does not depend on the split's size.)"""
    if isinstance(start_step, bool) or not isinstance(start_step, numbers.Integral):
        raise TypeError(f"start_step must be a whole number >= 0 (the global step to resume "
                        f"from), not {type(start_step).__name__} {start_step!r:.40}")
    if start_step < 0:
        raise ValueError(f"start_step must be >= 0, not {int(start_step)}")
    step = int(start_step)
    if repeat is True:
        most = (_INT64_MAX - 1) // max(int(batch_size), 1)
        counted = f"start_step x batch_size ({int(batch_size)}) below 2**63 - 1"
    else:
        epochs = max(int(repeat), 1) if isinstance(repeat, numbers.Integral) else 1
        most = _INT64_MAX // epochs - 1
        counted = f"(start_step + 1) x repeat ({epochs}) within 2**63 - 1"
    if step > most:
        raise ValueError(f"start_step must be at most {most} here ({counted}: tf.data counts "
                         f"the records and epochs before it in 64 bits), not {step}")
    return step


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """The options of ``reader.load`` (its docstring says what each does)."""
    split: str = "train"
    batch_size: int = 32
    shuffle: bool = True
    seed: Optional[int] = None
    repeat: Union[bool, int] = False
    drop_remainder: bool = False
    output: str = "tuple"                 # "tuple" or "dict"
    dtype: Any = None                     # a tf.DType or its name
    scale: Optional[float] = None
    cache: Optional[str] = None           # "memory" or a file path prefix
    input_context: Any = None             # a tf.distribute.InputContext
    pad: bool = False
    shuffle_buffer: Optional[int] = None
    cycle_length: Optional[int] = None
    deterministic: Optional[bool] = None  # None: True with a seed or shuffle=False
    version: Any = None                   # --incremental roots: the version to read
    start_step: int = 0
    resumable: bool = False
    masks: bool = False                   # --class_map datasets: (images, masks, labels)
    elastic: bool = False                 # every pipeline's share of the global order (resume after n changed)
    key: Any = None                       # --encrypt datasets: the KEK (key URI or object); None: dataset.json's
    local_cache: Optional[str] = None     # gs:// shards: a local directory of bounded copies
    local_cache_bytes: Optional[int] = None   # ... holding at most this many bytes

    def __post_init__(self) -> None:
        if self.output not in ("tuple", "dict"):
            raise ValueError(f"output must be 'tuple' or 'dict', not {self.output!r}")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        check_local_cache(self.local_cache, self.local_cache_bytes)
        global_batch = self.batch_size * (self.pipelines[1] if self.elastic else 1)
        object.__setattr__(self, "start_step", check_start_step(self.start_step, global_batch, self.repeat))
        if self.elastic and not self.ordered:
            raise ValueError("elastic=True needs an order that is a function of the step: a seed and "
                             "resumable=True (or shuffle=False), and no cache")

    @property
    def pipelines(self) -> tuple[int, int]:
        """``(this input pipeline, input pipelines)``: ``(0, 1)`` without ``input_context``."""
        if self.input_context is None:
            return 0, 1
        return int(self.input_context.input_pipeline_id), int(self.input_context.num_input_pipelines)

    @property
    def ordered(self) -> bool:
        """An order that is a function of the manifest, split, seed and epoch (resumable)."""
        return (self.resumable or not self.shuffle) and not self.cache

    @property
    def is_deterministic(self) -> bool:
        """``deterministic``, defaulted: True with a seed or without shuffling."""
        if self.deterministic is None:
            return self.seed is not None or not self.shuffle
        return self.deterministic

    @property
    def order_seed(self) -> Optional[int]:
        """The seed of the record order: none when the records are not shuffled."""
        return self.seed if self.shuffle else None
