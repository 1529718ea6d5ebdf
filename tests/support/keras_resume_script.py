"""A Keras fit that checkpoints every few steps and can be killed mid-epoch (reader/test_schedule_resume).

    python tests/support/keras_resume_script.py DATASET WORKDIR TOTAL_STEPS KILL_AT_STEP

Resumes from WORKDIR's checkpoint when there is one: weights, and the global
step, which goes to ``reader.load(start_step=...)``. Logs one line per trained
batch (step and a digest of each image) from inside ``train_step``, so the log
holds what training saw, not what the input pipeline prefetched.
"""
import hashlib
import json
import os
import signal
import sys

import keras
import numpy as np
import tensorflow as tf

from dcm2tfrecord import reader

BATCH, SAVE_EVERY, SEED = 4, 5, 11


def main(dataset, work, total, kill_at):
    state_path = os.path.join(work, "state.json")
    weights_path = os.path.join(work, "ckpt.weights.h5")
    start = json.load(open(state_path))["step"] if os.path.exists(state_path) else 0
    log = open(os.path.join(work, "batches.log"), "a")
    keras.utils.set_random_seed(0)

    class Logged(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(tf.reshape(tf.cast(x, "float32") / 255.0, [-1, 8 * 8 * 3]))

        def train_step(self, data):
            images = data[0].numpy()
            log.write(" ".join(hashlib.md5(i.tobytes()).hexdigest()[:10] for i in images) + "\n")
            log.flush()
            return super().train_step(data)

    class Checkpoint(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step = start + batch + 1
            if step % SAVE_EVERY == 0:
                self.model.save_weights(weights_path + ".tmp.weights.h5")
                os.replace(weights_path + ".tmp.weights.h5", weights_path)
                with open(state_path + ".tmp", "w") as handle:
                    json.dump({"step": step}, handle)
                os.replace(state_path + ".tmp", state_path)
            if step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)         # pre-empted: no clean-up at all

    model = Logged()
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), run_eagerly=True)
    model(np.zeros((1, 8, 8, 3), np.uint8))              # creates the weights load_weights fills
    if start:
        model.load_weights(weights_path)
    ds = reader.load(dataset, batch_size=BATCH, seed=SEED, repeat=True, resumable=True,
                     start_step=start)
    model.fit(ds, epochs=1, steps_per_epoch=total - start, callbacks=[Checkpoint()], verbose=0)
    np.save(os.path.join(work, "final_kernel.npy"), model.dense.kernel.numpy())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
