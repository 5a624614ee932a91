"""Offload to host memory (docs/model.md §14): ZeRO-Offload (Ren et al. 2021), ZeRO-Infinity's CPU
offload (Rajbhandari et al. 2021) and PyTorch FSDP's CPUOffload, on the host link of the hardware.

- `optimizer`: the FP32 master weights and the Adam moments live in host memory and the CPU runs
  Adam. Every micro-batch's backward sends the 16-bit gradients down the host link (DeepSpeed
  accumulates them in host memory); after the CPU step the updated 16-bit weights come back up.
- `optimizer+weights`: the 16-bit (or quantised, frozen) weights live in host memory too and every
  pass fetches each layer's just before it runs (the forward, the backward, a recomputed forward).
- `activations`: each layer's saved activations go down during the forward and come back up for
  its backward.

Overlap: the copies run on the DMA engines, beside the computation: gradients behind the backward,
fetches and activation copies behind the pass they serve, each but one layer's worth (the last, or
the first, has nothing to hide behind). The CPU's Adam step and the copy of the updated weights run
after the backward, pipelined with each other (chunks), and the devices wait for them (no delayed
parameter update).

Every function takes the Layout's offload code as floats or arrays (masks `Layout.offload_*`).
"""

from __future__ import annotations

from trainest import xp
from trainest.hardware import Hardware
from trainest.layout import Job, Layout, Num
from trainest.precision import optimizer_bytes_per_param, weight_bytes_per_param
from trainest.record import NamedTuple
from trainest.step.activations import activation_bytes_per_layer
from trainest.step.finetune import (
    adapter_params_per_layer,
    base_bytes_per_param,
    expert_adapter_params_per_layer,
    frozen_expert_layer_bytes,
    frozen_layer_bytes,
    frozen_weight_bytes,
    trainable_expert_params_local,
    trainable_params_local,
)
from trainest.step.optimizer import OPTIMIZER_BYTES_PER_PARAM
from trainest.step.schedule import stage_dense_params, stage_expert_params, stage_layers

# Host<->device copies from pinned memory reach ~80 % of the link's nominal rate per direction (PCIe 4.0
# x16: ~25 of 31.5 GB/s in NVIDIA's bandwidthTest and nvbandwidth); a prior, not fitted: no published
# offload run with its host link stated is in specs/runs. The same fraction is used for NVLink-C2C.
HOST_LINK_EFFICIENCY = 0.8
# STREAM-class kernels reach ~70 % of a server's peak DDR/LPDDR bandwidth; a prior, not fitted.
HOST_MEMORY_EFFICIENCY = 0.7
# CPU Adam (DeepSpeed's vectorised CPU-Adam): about 0.2 s per billion parameters on the DGX-2's
# 2 x 24-core Xeon Platinum 8168 (Ren et al. 2021, the Adam latency comparison of §5), i.e.
# 1e9 / (0.22 s · 48 cores) ≈ 1e8 parameters per second per core. Recalled from the paper, not
# re-checked against its text here: treat it as a prior.
CPU_ADAM_PARAMS_PER_S_PER_CORE = 1.0e8
# host memory per offloaded (trained) parameter: FP32 master 4 + Adam m, v 8 + the FP32 gradient
# accumulation buffer 4 (ZeRO-Offload keeps the 16M bytes of state of an M-parameter model on the CPU)
HOST_OPTIMIZER_BYTES_PER_PARAM = 16.0
IN_FLIGHT_LAYERS = 2.0            # layers a streamed resource keeps on the device: the one in use, the next


class HostRates(NamedTuple):
    """What one device gets of its host [B/s, params/s]: the link per direction, the host memory
    bandwidth and the CPU's Adam rate, each its share when devices share the host."""

    link_bytes_per_s: float
    memory_bytes_per_s: float
    adam_params_per_s: float


def host_rates(hw: Hardware) -> HostRates:
    """The host link (per direction, shared by `host.link.shared_by` devices), the host memory
    bandwidth and the CPU cores per device, with their achievable fractions."""
    host = hw.host
    return HostRates(link_bytes_per_s=(host.link.bytes_per_s_per_device or 0.0) * HOST_LINK_EFFICIENCY,
                     memory_bytes_per_s=(host.memory_bytes_per_s_per_device or 0.0) * HOST_MEMORY_EFFICIENCY,
                     adam_params_per_s=(host.cpu_cores_per_device or 0.0) * CPU_ADAM_PARAMS_PER_S_PER_CORE)


def cpu_adam_s(params: Num, rates: HostRates) -> Num:
    """The CPU's Adam step over `params` [s]: the slower of host memory (OPTIMIZER_BYTES_PER_PARAM
    per parameter, as on the device) and the cores (CPU_ADAM_PARAMS_PER_S_PER_CORE each)."""
    return xp.maximum(params * OPTIMIZER_BYTES_PER_PARAM / rates.memory_bytes_per_s, params / rates.adam_params_per_s)


def hidden_copy_s(copy_s: Num, window_s: Num, layers: Num) -> Num:
    """What a copy overlapped with `window_s` of computation adds [s]: what exceeds the window, at
    least one layer's share (nothing hides the first fetch or the last gradient)."""
    return xp.maximum(copy_s - window_s, copy_s / xp.maximum(layers, 1.0))


class OffloadState(NamedTuple):
    """What offload moves, per device of the slowest/heaviest stage [params, B]."""

    trained_params: Num         # parameters this device updates (its ZeRO shard of the trained ones)
    trained_per_layer: Num      # trained parameters of one layer on this device
    weight_bytes: Num           # the stage's stored weights on this device (after ZeRO-3 sharding)
    layer_weight_bytes: Num     # one layer's stored weights on this device
    activation_bytes_per_layer: Num   # kept for the backward, one micro-batch
    layers: Num                 # layers of the heaviest stage
    offloaded_layers: Num = 0.0  # of them, those whose activations go to the host under activation offload


def offload_state(job: Job, layout: Layout) -> OffloadState:
    """The offloaded quantities of a job and layout: trained parameters (all, or a LoRA's adapters)
    of this device's optimizer shard, the stage's stored weights (16-bit, or a frozen base's), and
    one layer's kept activations. A MoE model's routed experts count at their share on this device
    (÷e·t_e, their optimizer and ZeRO-3 shards over the expert shard group), the rest ÷t."""
    model = job.model
    heavy, _ = stage_layers(model, layout.pp, layout.vpp, layout.split)
    params_local = stage_dense_params(model, layout.pp, layout.vpp, layout.split) / layout.tp
    experts_local = stage_expert_params(model, layout.pp, layout.vpp, layout.split) / layout.expert_group
    w = weight_bytes_per_param(job.precision)
    z3 = xp.where(layout.zero >= 3, layout.shard * layout.cp, 1.0)
    z3_experts = xp.where(layout.zero >= 3, layout.expert_shard, 1.0)
    optimizer_shard = xp.where(layout.zero >= 1, layout.shard * layout.cp, 1.0)
    expert_optimizer_shard = xp.where(layout.zero >= 1, layout.expert_shard, 1.0)
    dense_layer = (model.params_per_layer - model.expert_params_per_layer) / layout.tp
    expert_layer = model.expert_params_per_layer / layout.expert_group
    weights, expert_weights = params_local * w, experts_local * w
    layer_weights = (dense_layer + expert_layer) * w
    trained_layer: Num = dense_layer + expert_layer
    if not xp.off(layout.finetune):
        frozen = layout.frozen > 0
        weights = xp.where(frozen, frozen_weight_bytes(job, layout, params_local), weights)
        expert_weights = xp.where(frozen, experts_local * base_bytes_per_param(job, layout), expert_weights)
        layer_weights = xp.where(frozen, frozen_layer_bytes(job, layout) + frozen_expert_layer_bytes(job, layout),
                                 layer_weights)
        trained_layer = xp.where(frozen, adapter_params_per_layer(job, layout)
                                 + expert_adapter_params_per_layer(job, layout), trained_layer)
    kept, _ = activation_bytes_per_layer(job, layout)
    trained = (trainable_params_local(job, layout, params_local) / optimizer_shard
               + trainable_expert_params_local(job, layout, experts_local) / expert_optimizer_shard)
    return OffloadState(trained_params=trained, trained_per_layer=trained_layer,
                        weight_bytes=weights / z3 + expert_weights / z3_experts, layer_weight_bytes=layer_weights,
                        activation_bytes_per_layer=kept, layers=heavy,
                        offloaded_layers=offloaded_layers(job.offload_layers, heavy))


def offloaded_layers(offload_layers: float, layers: Num) -> Num:
    """The layers of a stage whose activations activation offload sends to the host: every one (`offload_layers`
    0), or the first N (Megatron-Core's cpu_offloading_num_layers; Transformer Engine's CPU offload context), at most
    the stage's; the others keep theirs on the device (docs/model.md §14.3)."""
    if offload_layers <= 0:
        return layers
    return xp.minimum(offload_layers + 0.0 * layers, layers)


def host_optimizer_bytes_per_param(job: Job) -> float:
    """Host memory per offloaded trained parameter [B]: HOST_OPTIMIZER_BYTES_PER_PARAM with an FP32 master
    (ZeRO-Offload); without one (`master_weights` none: FSDP CPU offload of a pure 16-bit model, torch's
    optimizer on the host in the parameters' dtype) the optimizer's state and the 16-bit gradients."""
    if job.master_weights == "fp32":
        return HOST_OPTIMIZER_BYTES_PER_PARAM
    return optimizer_bytes_per_param(job.precision, job.adam_moments, job.optimizer, job.master_weights) \
        + job.grad_bytes


def host_bytes(layout: Layout, state: OffloadState, micro_batches: Num,
               optimizer_bytes: float = HOST_OPTIMIZER_BYTES_PER_PARAM) -> Num:
    """Host memory this device's offloaded state takes [B]: `optimizer_bytes` per trained parameter
    (optimizer; host_optimizer_bytes_per_param), the stored weights (optimizer+weights), the kept
    activations of the micro-batches in flight (activations)."""
    return (layout.offload_optimizer * optimizer_bytes * state.trained_params
            + layout.offload_weights * state.weight_bytes
            + layout.offload_activations * state.offloaded_layers * state.activation_bytes_per_layer
            * xp.minimum(micro_batches, layout.pp))


def offload_grad_bytes(job: Job) -> float:
    """Bytes per gradient sent to the host: the working gradients, in the working weights' dtype
    (DeepSpeed copies the fp16/bf16 gradients; FP32 ones at FP32/TF32) [B]."""
    return weight_bytes_per_param(job.precision)


class Offload(NamedTuple):
    """One step's host-side work [s] (0 without offload): what each part takes and what shows."""

    grads_down_s: Num           # the gradients of every micro-batch, device to host
    weights_up_s: Num           # the updated weights after the CPU step, host to device
    fetch_s: Num                # weights fetched for every pass (optimizer+weights)
    activations_s: Num          # activations down in the forward and up in the backward
    cpu_adam_s: Num             # the CPU's Adam step
    exposed_s: Num              # what all of it adds to the step
    host_bytes: Num             # host memory this device's offloaded state takes [B]
    grads_exposed_s: Num = 0.0  # the parts of exposed_s
    fetch_exposed_s: Num = 0.0
    activations_exposed_s: Num = 0.0
    tail_s: Num = 0.0           # the CPU step and the weights' copy back, after the backward: max of the two


def offload_terms(job: Job, layout: Layout, state: OffloadState, layers: Num, forward_s: Num,
                  backward_s: Num) -> Offload:
    """The traffic over the host link per step (gradients down, weights up or fetched per pass,
    activations both ways), the CPU's Adam, and what shows after overlap (module docstring), for
    the slowest stage's `layers` and one micro-batch's `forward_s` and `backward_s` on it [s]."""
    rates = host_rates(job.hardware)
    m, opt, weights, acts = layout.micro_batches(job), layout.offload_optimizer, layout.offload_weights, \
        layout.offload_activations
    link = rates.link_bytes_per_s
    grads = opt * offload_grad_bytes(job) * state.trained_params / link               # per micro-batch
    up = opt * (1.0 - weights) * weight_bytes_per_param(job.precision) * state.trained_params / link   # once per step
    fetch = weights * state.weight_bytes / link                                   # per pass
    act = acts * state.offloaded_layers * state.activation_bytes_per_layer / link  # per direction, per micro-batch
    adam = opt * cpu_adam_s(state.trained_params, rates)
    grads_shown = m * hidden_copy_s(grads, backward_s, layers)
    fetch_shown = m * (hidden_copy_s(fetch, forward_s, layers) * (1.0 + layout.full)
                       + hidden_copy_s(fetch, backward_s, layers))
    act_shown = m * (hidden_copy_s(act, forward_s, layers) + hidden_copy_s(act, backward_s, layers))
    tail = xp.maximum(adam, up)
    return Offload(grads_down_s=m * grads, weights_up_s=up, fetch_s=m * (2.0 + layout.full) * fetch,
                   activations_s=2.0 * m * act, cpu_adam_s=adam, exposed_s=grads_shown + fetch_shown + act_shown + tail,
                   host_bytes=host_bytes(layout, state, m, host_optimizer_bytes_per_param(job)),
                   grads_exposed_s=grads_shown, fetch_exposed_s=fetch_shown,
                   activations_exposed_s=act_shown, tail_s=tail)
