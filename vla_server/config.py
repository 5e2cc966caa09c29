"""Configuration, parsed once: `ServerArgs` (the CLI / Engine arguments) splits into frozen
per-component configs (`NodeConfig`), and each process receives only its own; `PortArgs` are the
socket addresses of one node. See docs/architecture.md."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from vla_server.ipc_dir import SOCKET_NAMES, make_ipc_dir
from vla_server.process_utils import IDLE_POLL_MS


def _opt(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class ServerArgs:
    model_path: str | None = _opt(None, "HF-format checkpoint folder (default: the demo VLA)")
    tokenizer_path: str | None = _opt(None, "tokenizer folder (default: model_path)")
    policy_plugin: list[str] = field(
        default_factory=list,
        metadata={
            "help": "a module to import in every process before the checkpoint is classified: "
            "it registers a policy family that lives outside vla_server (repeatable)"
        },
    )
    host: str = _opt("127.0.0.1", "HTTP bind address")
    port: int = _opt(30000, "HTTP port")
    api_key: str | None = _opt(
        None, "require 'Authorization: Bearer KEY' (all but /health and /healthz)"
    )
    device: str = _opt("auto", "cpu, cuda, or auto")
    dtype: str = _opt("auto", "auto, float32, float16 or bfloat16")
    attention_backend: str = _opt(
        "auto", "auto, torch or triton", choices=["auto", "torch", "triton"]
    )
    max_total_tokens: int | None = _opt(None, "KV pool size in tokens")
    mem_fraction_static: float | None = _opt(None, "size the KV pool from this memory fraction")
    max_running_requests: int = _opt(32, "max requests decoding together")
    context_length: int | None = _opt(None, "override the model's context length")
    stream_interval: int = _opt(1, "send a streaming chunk every N tokens")
    incremental_streaming_output: bool = _opt(
        False,
        "/generate stream chunks carry only the text and output_ids new since the previous "
        "chunk (default, as SGLang: everything generated so far)",
    )
    torch_num_threads: int | None = _opt(
        None, "torch CPU threads in the scheduler (default: all cores but two, at least one)"
    )
    prefill_torch_threads: int | None = _opt(
        None,
        "torch CPU threads for a step of one request with at least 64 new tokens, e.g. a lone "
        "robot's frame (default: all cores; a long step gains from every core, a decode step "
        "or a busy node from leaving cores to the other processes)",
    )
    log_level: str = _opt("info", "logging level")
    random_seed: int = _opt(0, "seed of the scheduler's sampler")
    chunked_prefill_size: int = _opt(
        256, "prefill tokens per step, mixed with decode steps (<= 0: whole prompts)"
    )
    disable_radix_cache: bool = _opt(False, "no prefix reuse across requests")
    disable_overlap_schedule: bool = _opt(False, "run the plain loop (no CPU/model overlap)")
    decode_reserve_ratio: float = _opt(
        1.0,
        "share of each running request's remaining new tokens kept free in the KV pool; "
        "below 1 admits more and retracts under KV pressure",
    )
    enable_priority_scheduling: bool = _opt(False, "order and preempt by request priority")
    schedule_low_priority_values_first: bool = _opt(False, "smaller priority values run first")
    default_priority_value: int = _opt(0, "priority of requests that give none")
    priority_scheduling_preemption_threshold: int = _opt(
        10, "a request preempts a running one only if its priority is better by more than this"
    )
    disable_priority_preemption: bool = _opt(False, "never preempt running requests")
    realtime_priority: int | None = _opt(
        None,
        "requests at or above this priority (in the node's priority order) are protected: while "
        "one runs or waits, others join its steps only where the step-time model measured online "
        "predicts they do not slow it, else they are held (keeping their KV) for at most "
        "--max-hold-ms (default: off)",
    )
    max_hold_ms: float = _opt(
        50.0, "priority isolation: longest a less important request is held without a step"
    )
    realtime_tolerance: float = _opt(
        0.05, "priority isolation: how much others may slow a protected step (predicted, a share)"
    )
    realtime_background_lane: str = _opt(
        "auto",
        "priority isolation on a CPU: less important requests held out of protected steps run "
        "meanwhile in a second model lane on another core, at the lowest OS priority (auto: on "
        "a CPU with at least two cores, while a one-token step takes at least 8 ms; shorter "
        "steps are mostly interpreter time, which two lanes share)",
        choices=["auto", "on", "off"],
    )
    realtime_cpu_split: str = _opt(
        "auto",
        "priority isolation with the background lane: the node's other threads (scheduler loop, "
        "lane, detokenizer, front end) keep off the main lane's cores and its worker gets a "
        "higher OS priority (with CAP_SYS_NICE) (auto: whenever the lane is on; off: leave "
        "placement to the OS or your own taskset)",
        choices=["auto", "off"],
    )
    realtime_reserve_ms: float = _opt(
        0.0,
        "priority isolation for a control loop: protected requests that arrive at a steady "
        "period are expected again; no step starts that would still run within this many ms "
        "of the expected arrival, nor while it is late by up to this many ms (0: off)",
    )
    max_queued_requests: int | None = _opt(None, "waiting-queue bound; beyond it: 503")
    max_session_held_tokens: int = _opt(
        65536, "KV tokens open sessions may keep pinned; oldest sessions lose their pins first"
    )
    max_request_bytes: int = _opt(
        32 * 1024 * 1024,
        "largest request body or openpi WebSocket message, in bytes (a few dozen camera frames)",
    )
    max_image_bytes: int = _opt(20 * 1024 * 1024, "largest encoded image accepted, in bytes")
    max_image_pixels: int = _opt(4096 * 4096, "largest image accepted, in pixels (from its header)")
    max_images_per_request: int = _opt(8, "most images (cameras) in one request")
    allowed_local_media_path: str | None = _opt(
        None, "serve local image paths inside this folder (off by default)"
    )
    allow_remote_media: bool = _opt(False, "fetch http(s) image URLs (off by default)")
    mm_embedding_cache_mb: float = _opt(256.0, "byte budget of the vision-embedding cache, MB")
    mm_pixel_cache_mb: float = _opt(
        64.0, "byte budget of the main process's cache of preprocessed frames, MB (0: off)"
    )
    image_backend: str = _opt(
        "pil",
        "image resize and normalisation as transformers' PIL backend (pil: bit for bit) or as "
        "its torchvision backend on CPU (torch: at most one level from PIL, resize ~4x faster)",
        choices=["pil", "torch"],
    )
    served_model_name: str | None = _opt(None, "model id clients see (default: the folder name)")
    default_num_actions: int | None = _opt(
        None, "robot default: action vectors for a /generate request with images that names none"
    )
    default_unnorm_key: str | None = _opt(
        None, "robot default: unnorm key of a robot request that names none"
    )
    default_deadline_ms: float | None = _opt(
        None, "robot default: deadline (ms) of a robot request that names none"
    )
    openpi_action_horizon: int | None = _opt(
        None,
        "openpi policy endpoint: actions per reply by default (default: the policy's own, 1 or "
        "its whole chunk)",
    )
    openpi_image_keys: list[str] = field(
        default_factory=list,
        metadata={
            "help": "openpi policy endpoint: observation image keys in camera order (default: auto)"
        },
    )
    openpi_unnorm_key: str | None = _opt(None, "openpi policy endpoint: default unnorm key")
    robot_openpi_idle_timeout: float = _opt(
        30.0, "vLLM-Omni robot socket: close a socket idle this many seconds (0: never)"
    )
    robot_openpi_max_payload_bytes: int = _opt(
        16 * 1024 * 1024,
        "vLLM-Omni robot socket: a larger frame gets an error reply, the socket stays open "
        "(frames over --max-request-bytes are refused by the WebSocket layer, which closes it)",
    )
    lerobot_grpc_port: int | None = _opt(
        None,
        "LeRobot async inference door (gRPC transport.AsyncInference, LeRobot's RobotClient): "
        "its port, on --host (default: off)",
    )
    lerobot_grpc_insecure: bool = _opt(
        False,
        "LeRobot door: serve on a non-loopback --host without --api-key (LeRobot's client cannot "
        "send a key; its payloads are pickles, read here by a restricted unpickler)",
    )
    lerobot_accept_any_policy: bool = _opt(
        False,
        "LeRobot door: a client naming another policy type or checkpoint than the served one "
        "gets a warning in the log instead of an error (the node still serves its own)",
    )
    lerobot_fps: float = _opt(
        30.0, "LeRobot door: the robot's control rate; action i is stamped obs time + i/fps"
    )
    lerobot_obs_queue_timeout: float = _opt(
        2.0, "LeRobot door: seconds GetActions waits for an observation before replying Empty"
    )
    sglang_action_max_payload_bytes: int = _opt(
        16 * 1024 * 1024,
        "SGLang's action WebSockets: a larger frame gets an error reply, the socket stays open "
        "(frames over --max-request-bytes are refused by the WebSocket layer, which closes it)",
    )
    openpi_state_keys: list[str] = field(
        default_factory=list,
        metadata={
            "help": "openpi policy endpoint: observation keys whose values, concatenated, are the "
            "robot state a policy needs (default: state, observation/state or "
            "observation.state)"
        },
    )
    prompt_convention: str = _opt(
        "auto",
        "whose conventions a policy's action prompts follow where LeRobot's and openpi's differ "
        "(see the policy family's prompt module); auto: the checkpoint's origin",
        choices=["auto", "lerobot", "openpi"],
    )
    watchdog_interval: float = _opt(0.2, "seconds between child liveness checks")
    watchdog_timeout: float = _opt(
        300.0,
        "seconds the scheduler or the detokenizer may go without a heartbeat (one per loop "
        "iteration, at least one a second when idle or paused) before it counts as hung: "
        "/health answers 503 and the node exits 1. 300 (SGLang's default; at least 2) covers "
        "the longest the scheduler's loop may block in one go: a cold Triton compile, a "
        "prefill chunk of a 7B model on CPU, a /update_weights_from_disk load (it runs on "
        "that loop)",
    )
    graceful_shutdown_timeout: float = _opt(5.0, "seconds SIGTERM waits for in-flight requests")
    request_read_timeout: float = _opt(
        30.0,
        "seconds a client has to send a whole request (head and body) after connecting or after "
        "its previous response; then its connection is closed (slowloris)",
    )
    send_timeout: float = _opt(
        30.0,
        "seconds a response may wait on a client that does not read it (its socket full); then "
        "the connection is closed and its request aborted",
    )

    def resolved_tokenizer_path(self) -> str:
        assert self.model_path is not None
        return self.tokenizer_path or self.model_path

    def configs(self) -> NodeConfig:
        """The per-component configs (model_path must be resolved first)."""
        assert self.model_path is not None, "resolve the model path first"
        ckpt = CheckpointConfig(
            self.model_path, self.resolved_tokenizer_path(), tuple(self.policy_plugin)
        )
        return NodeConfig(
            frontend=FrontendConfig(
                **_pick(
                    FrontendConfig,
                    self,
                    checkpoint=ckpt,
                    openpi_image_keys=tuple(self.openpi_image_keys),
                    openpi_state_keys=tuple(self.openpi_state_keys),
                )
            ),
            scheduler=SchedulerConfig(**_pick(SchedulerConfig, self)),
            model=ModelRunnerConfig(**_pick(ModelRunnerConfig, self, checkpoint=ckpt)),
            detokenizer=DetokenizerConfig(**_pick(DetokenizerConfig, self, checkpoint=ckpt)),
            launch=LaunchConfig(**_pick(LaunchConfig, self)),
        )

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        for f in dataclasses.fields(cls):
            flag = "--" + f.name.replace("_", "-")
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
            kw: dict[str, Any] = {"default": default, "help": f.metadata.get("help", "")}
            if "choices" in f.metadata:
                kw["choices"] = f.metadata["choices"]
            ftype = f.type if isinstance(f.type, str) else f.type.__name__
            if ftype.startswith("bool"):
                kw["action"] = argparse.BooleanOptionalAction
            elif ftype.startswith("int"):
                kw["type"] = int
            elif ftype.startswith("float"):
                kw["type"] = float
            elif ftype.startswith("list"):
                kw["nargs"] = "*"
            parser.add_argument(flag, dest=f.name, **kw)

    @classmethod
    def from_cli_args(cls, ns: argparse.Namespace) -> ServerArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(ns).items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d.get("api_key"):
            d["api_key"] = "***"
        return d


def _pick(cls: type, args: ServerArgs, **given: Any) -> dict[str, Any]:
    """The fields of config `cls` taken from `args` by name, plus `given`."""
    names = [f.name for f in dataclasses.fields(cls) if f.name not in given]
    return {**{n: getattr(args, n) for n in names}, **given}


@dataclass(frozen=True)
class CheckpointConfig:
    """Where the weights and the tokenizer are (every process loads the tokenizer)."""

    model_path: str
    tokenizer_path: str
    policy_plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class FrontendConfig:
    """The main process: HTTP routes, request validation, image front end, openpi endpoint."""

    checkpoint: CheckpointConfig
    api_key: str | None
    served_model_name: str | None
    default_priority_value: int
    # Priority isolation, for the order in which streams are served (frontend/stream_order.py).
    realtime_priority: int | None
    schedule_low_priority_values_first: bool
    max_hold_ms: float
    max_request_bytes: int
    max_image_bytes: int
    max_image_pixels: int
    max_images_per_request: int
    allowed_local_media_path: str | None
    allow_remote_media: bool
    mm_pixel_cache_mb: float
    image_backend: str
    incremental_streaming_output: bool
    default_num_actions: int | None
    default_unnorm_key: str | None
    default_deadline_ms: float | None
    openpi_action_horizon: int | None
    openpi_image_keys: tuple[str, ...]
    openpi_unnorm_key: str | None
    openpi_state_keys: tuple[str, ...]
    robot_openpi_idle_timeout: float
    robot_openpi_max_payload_bytes: int
    sglang_action_max_payload_bytes: int
    prompt_convention: str
    host: str  # the address the node's doors bind (HTTP's is LaunchConfig.host, the same flag)
    lerobot_grpc_port: int | None
    lerobot_grpc_insecure: bool
    lerobot_accept_any_policy: bool
    lerobot_fps: float
    lerobot_obs_queue_timeout: float

    def __post_init__(self) -> None:
        if self.lerobot_grpc_port is None:
            return
        if self.lerobot_fps <= 0 or self.lerobot_obs_queue_timeout < 0:
            raise ValueError("--lerobot-fps must be > 0 and --lerobot-obs-queue-timeout >= 0")
        if not (is_loopback(self.host) or self.api_key or self.lerobot_grpc_insecure):
            raise ValueError(
                f"--lerobot-grpc-port on {self.host!r} (not loopback) needs --api-key, or "
                "--lerobot-grpc-insecure to serve LeRobot's unauthenticated pickle protocol there"
            )


def is_loopback(host: str) -> bool:
    """Whether a bind address only reaches this machine ("localhost" or a loopback IP)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


@dataclass(frozen=True)
class ModelRunnerConfig:
    """The model in the scheduler process: weights, device, KV pool size."""

    checkpoint: CheckpointConfig
    device: str
    dtype: str
    attention_backend: str
    max_total_tokens: int | None
    mem_fraction_static: float | None
    max_running_requests: int
    context_length: int | None
    torch_num_threads: int | None
    prefill_torch_threads: int | None
    random_seed: int


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduling rules and caches of the scheduler process."""

    max_running_requests: int
    chunked_prefill_size: int
    disable_radix_cache: bool
    disable_overlap_schedule: bool
    decode_reserve_ratio: float
    enable_priority_scheduling: bool
    schedule_low_priority_values_first: bool
    priority_scheduling_preemption_threshold: int
    disable_priority_preemption: bool
    realtime_priority: int | None
    max_hold_ms: float
    realtime_tolerance: float
    realtime_background_lane: str
    realtime_cpu_split: str
    realtime_reserve_ms: float
    max_queued_requests: int | None
    max_session_held_tokens: int
    mm_embedding_cache_mb: float
    stream_interval: int
    log_level: str

    def __post_init__(self) -> None:
        if not self.realtime_reserve_ms >= 0:
            raise ValueError("--realtime-reserve-ms must be 0 (off) or more")
        if self.realtime_reserve_ms and self.realtime_priority is None:
            raise ValueError("--realtime-reserve-ms keeps time for --realtime-priority requests")


@dataclass(frozen=True)
class DetokenizerConfig:
    checkpoint: CheckpointConfig
    log_level: str


@dataclass(frozen=True)
class LaunchConfig:
    """Starting, watching and stopping the node's processes and its HTTP server."""

    host: str
    port: int
    log_level: str
    watchdog_interval: float
    watchdog_timeout: float
    graceful_shutdown_timeout: float
    request_read_timeout: float
    send_timeout: float

    def __post_init__(self) -> None:
        # An idle, healthy child beats only once per IDLE_POLL_MS.
        floor = 2 * IDLE_POLL_MS / 1000
        if not self.watchdog_timeout >= floor:
            raise ValueError(f"--watchdog-timeout must be at least {floor:g} seconds")


@dataclass(frozen=True)
class NodeConfig:
    frontend: FrontendConfig
    scheduler: SchedulerConfig
    model: ModelRunnerConfig
    detokenizer: DetokenizerConfig
    launch: LaunchConfig


def default_torch_threads() -> int:
    """CPU threads for the model: leave cores to the main process and the detokenizer.

    Their per-token work is small, but if it preempts one of the model's OpenMP threads, the
    whole step waits at the next barrier: on a 2-core machine 2 model threads made the served
    inter-token latency 20x the raw step, 1 thread made it equal (`vla_server.bench serving`).
    """
    return max(1, (os.cpu_count() or 1) - 2)


@dataclass
class PortArgs:
    """ipc:// endpoints in a private directory (mode 0700) that only this user can reach; its
    name records the owner, so a later node removes it if this one is killed (`ipc_dir`)."""

    ipc_dir: str
    tokenizer_ipc_name: str  # TokenizerManager PULL (bind) <- detokenizer
    scheduler_input_ipc_name: str  # TokenizerManager PUSH -> scheduler PULL (bind)
    detokenizer_ipc_name: str  # detokenizer PULL (bind) <- scheduler
    rpc_ipc_name: str  # TokenizerManager DEALER (bind) <-> scheduler DEALER

    @classmethod
    def init_new(cls) -> PortArgs:
        d = make_ipc_dir()
        # The names come from ipc_dir, which removes only what it knows a node binds.
        url = {name: f"ipc://{d}/{name}" for name in SOCKET_NAMES}
        return cls(
            ipc_dir=d,
            tokenizer_ipc_name=url["tokenizer"],
            scheduler_input_ipc_name=url["scheduler_input"],
            detokenizer_ipc_name=url["detokenizer"],
            rpc_ipc_name=url["rpc"],
        )

    def cleanup(self) -> None:
        shutil.rmtree(self.ipc_dir, ignore_errors=True)
