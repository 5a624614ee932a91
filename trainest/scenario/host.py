"""The host options (`--host-cores`, `--host-memory-gb`, `--host-pcie-gen`, `--host-pcie-lanes`; scenario keys
`host_cores`, ...): the CPU side of a node that CPU offload uses, given instead of the hardware's. A PCIe card's
file describes no server, so its host is a typical dual-socket server of its PCIe generation, stated as derived
(hardware.with_typical_host); these options replace its figures, and a new generation or lane count sets the
link's rate and the typical server the other figures come from."""

from __future__ import annotations

from typing import Any

from trainest import fields as F
from trainest.errors import SpecError, at, name_of
from trainest.hardware import (
    GB,
    PCIE_GENERATIONS,
    PCIE_LANES,
    Hardware,
    Host,
    pcie_bytes_per_s,
    with_typical_host,
)
from trainest.knobs import HOST_NAMES

HOST_KEYS = HOST_NAMES      # their scenario keys are their names
# a Host field as with_typical_host names what it filled (Host.filled)
_FIELD_OF = {"cpu_cores": "cpu_cores", "memory_gb": "memory_bytes", "memory_gb_per_s": "memory_bytes_per_s",
             "devices": "devices", "system": "system", "cpu": "cpu"}


def host_values(hw: Hardware) -> dict[str, Any]:
    """The host figures in effect, by scenario key; None where the hardware has none."""
    host = hw.host
    return {"host_cores": host.cpu_cores,
            "host_memory_gb": None if host.memory_bytes is None else host.memory_bytes / GB,
            "host_pcie_gen": host.link.pcie_gen, "host_pcie_lanes": host.link.pcie_lanes}


def host_of(data: dict[str, Any], hardware: Hardware, where: str) -> tuple[Hardware, tuple[tuple[str, Any], ...]]:
    """(`hardware` with the host figures the scenario gives, checked against it; those figures as (key, value)).
    A figure not given is the hardware's, and is not echoed: a reload on other hardware takes that one's."""
    given = {k: data[k] for k in HOST_KEYS if data.get(k) is not None}
    if not given:
        return hardware, ()
    cores = F.integer(given.get("host_cores"), at(where, "host_cores"), maximum=10**6, allow_none=True)
    memory_gb = F.number(given.get("host_memory_gb"), at(where, "host_memory_gb"), maximum=1e9, allow_none=True)
    gen = None if "host_pcie_gen" not in given else F.integer_choice(given["host_pcie_gen"],
                                                                     at(where, "host_pcie_gen"), PCIE_GENERATIONS)
    lanes = None if "host_pcie_lanes" not in given else F.integer_choice(given["host_pcie_lanes"],
                                                                         at(where, "host_pcie_lanes"), PCIE_LANES)
    _check_applies(hardware, given, where)
    values = {"host_cores": cores, "host_memory_gb": memory_gb, "host_pcie_gen": gen, "host_pcie_lanes": lanes}
    host = with_host(hardware.host, cpu_cores=cores, memory_gb=memory_gb, pcie_gen=gen, pcie_lanes=lanes)
    return hardware._replace(host=host), tuple((k, values[k]) for k in HOST_KEYS if k in given)


def _check_applies(hw: Hardware, given: dict[str, Any], where: str) -> None:
    """A host memory needs a device with memory of its own; a PCIe generation or lane count a PCIe host link
    (or one the file leaves unknown), and both where the file gives neither."""
    if hw.memory_unified and "host_memory_gb" in given:
        raise SpecError(f"{at(where, 'host_memory_gb')}: {F.show(given['host_memory_gb'])} does not apply to "
                        f"{hw.name}: its memory is unified (CPU and device share {hw.memory_bytes / 1e9:.0f} GB); "
                        f"leave the host memory out")
    pcie = [k for k in ("host_pcie_gen", "host_pcie_lanes") if k in given]
    link = hw.host.link
    if not pcie:
        return
    if hw.memory_unified or link.kind not in (None, "pcie"):
        names = " and ".join(name_of(where, k) for k in pcie)
        raise SpecError(f"{at(where, pcie[0])}: {F.show(given[pcie[0]])} does not apply to {hw.name}: its host "
                        f"link is {link.name or link.kind}, not PCIe; leave {names} out")
    for key, known in (("host_pcie_gen", link.pcie_gen), ("host_pcie_lanes", link.pcie_lanes)):
        if key not in given and known is None:
            other = pcie[0]
            raise SpecError(f"{at(where, other)}: {F.show(given[other])} needs {at(where, key)} too: "
                            f"{hw.name}'s file does not give its host link's {key.removeprefix('host_pcie_')}")


def with_host(host: Host, *, cpu_cores: int | None = None, memory_gb: float | None = None,
              pcie_gen: int | None = None, pcie_lanes: int | None = None) -> Host:
    """`host` with the figures given (None: kept); a PCIe generation or lane count sets the link's nominal
    rate (hardware.pcie_bytes_per_s), and the figures a typical server supplied are taken again from the
    typical server of the link's generation (hardware.with_typical_host), stated as derived."""
    link = host.link
    if pcie_gen is not None or pcie_lanes is not None:
        gen = pcie_gen if pcie_gen is not None else link.pcie_gen
        lanes = pcie_lanes if pcie_lanes is not None else link.pcie_lanes
        assert gen is not None and lanes is not None     # _check_applies
        if (gen, lanes) != (link.pcie_gen, link.pcie_lanes):
            link = link._replace(kind="pcie", pcie_gen=gen, pcie_lanes=lanes, bytes_per_s=pcie_bytes_per_s(gen, lanes),
                                 name=f"PCIe Gen{gen} x{lanes}")
    bare = host._replace(link=link, derived="", filled=(), **{_FIELD_OF[name]: _bare(name) for name in host.filled})
    if cpu_cores is not None:
        bare = bare._replace(cpu_cores=cpu_cores)
    if memory_gb is not None:
        bare = bare._replace(memory_bytes=memory_gb * GB)
    return with_typical_host(bare, link.pcie_gen)


def _bare(name: str) -> Any:
    return "" if name in ("system", "cpu") else None
