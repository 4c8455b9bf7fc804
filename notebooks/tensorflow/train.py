"""MultiWorkerMirroredStrategy on the workers Azure ML starts: a reduce, then model.fit."""

import json
import os

# Azure ML sends "ps": [] even without parameter servers; TensorFlow 2.13 and later crash
# on it, so drop it first (as Azure/azureml-examples' TensorFlow job does)
tf_config = json.loads(os.environ["TF_CONFIG"])
if not tf_config["cluster"].get("ps"):
    tf_config["cluster"].pop("ps", None)
os.environ["TF_CONFIG"] = json.dumps(tf_config)
# model.fit under MultiWorkerMirroredStrategy needs Keras 2 (the tf-keras package)
os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = tf_config["task"]["index"]
total = strategy.reduce(
    tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(float(index + 1))), axis=None
)
print(f"worker {index}: sum across {strategy.num_replicas_in_sync} workers = {float(total)}")

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
data = tf.data.Dataset.from_tensor_slices((np.ones((64, 4), "float32"), np.ones((64, 1), "float32")))
history = model.fit(data.batch(16).repeat(), epochs=1, steps_per_epoch=4, verbose=0)
print(f"worker {index}: loss after 4 steps {history.history['loss'][-1]:.4f}")
