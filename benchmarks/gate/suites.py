"""Which suites the gate runs, the test files of each, and staging them into the gate's folder."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
GATE = ROOT / "realsuite"  # the gate's rootdir: pytest.ini, our suites, the staging folder
STAGE = GATE / "_gate"  # generated, git-ignored: the copied libraries' tests and the results

# Keras's own test files, relative to keras/src in the installed wheel, in the order they run.
# Chosen to pass without the plugin with KERAS_BACKEND=tensorflow on a CPU-only machine, and to
# run in about 3 minutes there (2 cores). Not taken: files that need JAX, torch, grain, orbax or
# tensorboard; files that deserialize classes defined in their own module by module name (they
# only work inside the keras package: core/wrapper, rnn/rnn, rnn/dropout_rnn_cell); and the
# slowest files (models/model_test, trainers/trainer_test, conv_test, embedding_test, ...).
KERAS_TEST_FILES: tuple[str, ...] = (
    # layers/core
    "layers/core/dense_test.py",
    "layers/core/identity_test.py",
    "layers/core/input_layer_test.py",
    "layers/core/lambda_layer_test.py",
    "layers/core/masking_test.py",
    # layers/activations
    "layers/activations/activation_test.py",
    "layers/activations/elu_test.py",
    "layers/activations/leaky_relu_test.py",
    "layers/activations/prelu_test.py",
    "layers/activations/relu_test.py",
    "layers/activations/softmax_test.py",
    # layers/normalization
    "layers/normalization/group_normalization_test.py",
    "layers/normalization/layer_normalization_test.py",
    "layers/normalization/rms_normalization_test.py",
    "layers/normalization/unit_normalization_test.py",
    # layers/convolutional
    "layers/convolutional/depthwise_conv_test.py",
    # layers/pooling
    "layers/pooling/adaptive_pooling1d_test.py",
    "layers/pooling/adaptive_pooling2d_test.py",
    "layers/pooling/adaptive_pooling3d_test.py",
    "layers/pooling/average_pooling_test.py",
    "layers/pooling/global_average_pooling_test.py",
    "layers/pooling/global_max_pooling_test.py",
    "layers/pooling/max_pooling_test.py",
    # layers/rnn
    "layers/rnn/conv_lstm_test.py",
    "layers/rnn/simple_rnn_test.py",
    "layers/rnn/time_distributed_test.py",
    # layers/merging
    "layers/merging/merging_test.py",
    # layers/reshaping
    "layers/reshaping/cropping1d_test.py",
    "layers/reshaping/cropping2d_test.py",
    "layers/reshaping/flatten_test.py",
    "layers/reshaping/permute_test.py",
    "layers/reshaping/repeat_vector_test.py",
    "layers/reshaping/reshape_test.py",
    "layers/reshaping/up_sampling1d_test.py",
    "layers/reshaping/zero_padding1d_test.py",
    "layers/reshaping/zero_padding2d_test.py",
    "layers/reshaping/zero_padding3d_test.py",
    # optimizers
    "optimizers/adadelta_test.py",
    "optimizers/adagrad_test.py",
    "optimizers/adam_test.py",
    "optimizers/adamax_test.py",
    "optimizers/adamw_test.py",
    "optimizers/ftrl_test.py",
    "optimizers/lamb_test.py",
    "optimizers/loss_scale_optimizer_test.py",
    "optimizers/nadam_test.py",
    "optimizers/optimizer_test.py",
    "optimizers/rmsprop_test.py",
    "optimizers/sgd_test.py",
    "optimizers/schedules/learning_rate_schedule_test.py",
    # callbacks
    "callbacks/callback_test.py",
    "callbacks/lambda_callback_test.py",
    "callbacks/terminate_on_nan_test.py",
    # trainers
    "trainers/compile_utils_test.py",
    "trainers/epoch_iterator_test.py",
    "trainers/data_adapters/data_adapter_utils_test.py",
    # models
    "models/cloning_test.py",
    "models/functional_test.py",
    "models/sequential_test.py",
    # the TensorFlow backend
    "backend/tensorflow/name_scope_test.py",
    "backend/tensorflow/saved_model_test.py",
    "backend/tensorflow/distribute_test.py",
    "backend/tensorflow/optimizer_distribute_test.py",
)

# The project's own suite of TensorFlow-style tests, relative to realsuite/.
OWN_TEST_FILES: tuple[str, ...] = (
    "tf_style/test_tf_testcase.py",
    "tf_style/test_module_fixtures.py",
    "tf_style/test_warnings_as_errors.py",
)

# Sonnet's own test files (dm-sonnet 2.0.2, in the project's test extra), relative to sonnet/src
# in the installed wheel, in the order they run: tf.test.TestCase subclasses (Sonnet's
# test_utils.TestCase, which enters a tf.device scope in setUp and leaves it in tearDown) with
# absl parameterized, the style of many TensorFlow libraries; no Keras. Chosen to pass without
# the plugin on a CPU-only machine, with TensorFlow 2.16 to 2.21, and to run in about 35 s there
# (2 cores, -n 2). Not taken: depthwise_conv_test (TensorFlow 2.16's depthwise_conv2d_native
# crashes the interpreter with a segmentation fault in it, plugin or not);
# optimizers/momentum_test, rmsprop_test and sgd_test (their reference tests call
# tf.keras.optimizers.legacy, gone in Keras 3); conformance/keras_test (a Keras 3 layer that
# wraps a Sonnet module does not track its variables: its counts of variables fail);
# conformance/checkpoint_test (finds its golden checkpoints by a path relative to the Sonnet
# repository's root, and its tests share one temporary folder across xdist workers: outcomes
# flip from run to run); conformance/doctest_test (NumPy 2 prints scalars as np.float32(3.0),
# which sonnet.functional's doctests do not expect); conformance/tensorflow1_test (graph mode
# only: all skipped); and the slowest files (conformance/function_test, 190 s of tests;
# optimizers/adam_test, 130 s; conformance/optimizer_test and xla_test, 60 and 45 s;
# nets/cifar10_convnet_test and resnet_test, 35 and 25 s).
SONNET_TEST_FILES: tuple[str, ...] = (
    # modules
    "base_test.py",
    "build_test.py",
    "deferred_test.py",
    "once_test.py",
    "utils_test.py",
    "custom_getter_test.py",
    "sequential_test.py",
    "batch_apply_test.py",
    "mixed_precision_test.py",
    # layers
    "linear_test.py",
    "parallel_linear_test.py",
    "bias_test.py",
    "embed_test.py",
    "conv_test.py",
    "conv_transpose_test.py",
    "reshape_test.py",
    "pad_test.py",
    "dropout_test.py",
    "leaky_clip_by_value_test.py",
    "scale_gradient_test.py",
    "recurrent_test.py",
    # normalization, state
    "axis_norm_test.py",
    "batch_norm_test.py",
    "group_norm_test.py",
    "moving_averages_test.py",
    "metrics_test.py",
    # initializers, regularizers
    "initializers_test.py",
    "regularizers_test.py",
    # nets
    "nets/mlp_test.py",
    "nets/vqvae_test.py",
    "nets/dnc/control_test.py",
    "nets/dnc/read_test.py",
    "nets/dnc/util_test.py",
    "nets/dnc/write_test.py",
    # distribution
    "distribute/replicator_test.py",
    "distribute/distributed_batch_norm_test.py",
    # the functional API (Sonnet's own, on TensorFlow)
    "functional/haiku_test.py",
    "functional/jax_test.py",
    "functional/optimizers_test.py",
    # conformance: every module built, copied, pickled, under a strategy, saved and loaded
    "conformance/api_test.py",
    "conformance/descriptors_test.py",
    "conformance/goldens_test.py",
    "conformance/build_test.py",
    "conformance/copy_test.py",
    "conformance/pickle_test.py",
    "conformance/distribute_test.py",
    "conformance/saved_model_test.py",
)


@dataclass(frozen=True)
class Suite:
    """One library's own tests, as the gate stages and runs them: a suite of its own."""

    name: str  # in the output, the files' names and --suite
    library: str  # for people
    distribution: str  # the installed distribution, for its version
    module: str  # the package whose installed files hold the tests
    folder: str  # the tests' folder in that package
    package: str  # the copies' package under _gate/ (never the library's: it would shadow it)
    files: tuple[str, ...]
    own: tuple[str, ...] = ()  # our suite's files, run with this one, relative to realsuite/
    conftest: str = ""  # a file of realsuite/ copied to _gate/conftest.py
    required: bool = False  # its library missing is an error, not a skipped suite
    install: str = ""  # where its library comes from, for the line that skips its suite
    chosen_from: str = ""  # the library's release whose test files the list names

    def paths(self) -> list[str]:
        """Its test files, relative to realsuite/, in the order they run."""
        staged = [f"{STAGE.name}/{self.package}/{name}" for name in self.files]
        return staged + list(self.own)


SUITES: tuple[Suite, ...] = (
    Suite(
        name="keras",
        library="Keras",
        distribution="keras",
        module="keras",
        folder="src",
        package="keras_src",
        files=KERAS_TEST_FILES,
        chosen_from="3.15.1",
        own=OWN_TEST_FILES,
        conftest="keras_conftest.py",
        required=True,
        install="TensorFlow installs it",
    ),
    Suite(
        name="sonnet",
        library="Sonnet",
        distribution="dm-sonnet",
        module="sonnet",
        folder="src",
        package="sonnet_src",
        files=SONNET_TEST_FILES,
        chosen_from="2.0.2",
        install="the project's test extra installs it: pip install -e '.[test]'",
    ),
)


def tests_root(suite: Suite) -> Path | None:
    """The suite's test folder in the installed package, found without importing it (and
    TensorFlow); None where the library is not installed."""
    spec = importlib.util.find_spec(suite.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / suite.folder


def stage(suite: Suite) -> list[str] | None:
    """Copy the suite's test files under realsuite/_gate/, with its conftest; None where its
    library is not installed (an error if the suite is required).

    The copies form a package (``keras_src``, ``sonnet_src``), as they do in the libraries'
    repositories, so that pytest imports them by their dotted names and Keras's ``from conftest
    import`` finds ours; they import the library itself by its own name, from the installed
    wheel. Returns the suite's paths relative to realsuite/, in the order they run.
    """
    source = tests_root(suite)
    if source is None:
        if suite.required:
            raise SystemExit(f"realsuite: {suite.library} is not installed in this environment")
        return None
    missing = [name for name in suite.files if not (source / name).is_file()]
    if missing:
        raise SystemExit(
            f"realsuite: not in the installed {suite.library} ({source}): {', '.join(missing)}"
        )
    package = STAGE / suite.package
    if package.exists():
        shutil.rmtree(package)
    for name in suite.files:
        target = package / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)
    for folder in [package, *package.rglob("*")]:
        if folder.is_dir() and folder.name != "__pycache__":
            (folder / "__init__.py").touch()
    if suite.conftest:
        shutil.copyfile(GATE / suite.conftest, STAGE / "conftest.py")
    return suite.paths()
