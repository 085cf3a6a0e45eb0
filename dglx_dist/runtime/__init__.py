"""Runtime: launch environment, topology, process groups, the comm layer and the session."""
from dglx_dist.runtime.comm import ByteCounter, Comm, PeerError
from dglx_dist.runtime.env import DistEnv, EnvError, read_env
from dglx_dist.runtime.session import Session, current_session, init
from dglx_dist.runtime.topology import Topology

__all__ = ["init", "current_session", "Session", "Comm", "ByteCounter", "PeerError", "DistEnv",
           "EnvError", "read_env", "Topology"]
