"""rcl_interfaces/srv: the six services every node offers for its parameters (as rosidl makes
them: `GetParameters.Request` is the message `rcl_interfaces/srv/GetParameters_Request`)."""

from __future__ import annotations

from ros_bridge.shim.fields import seq
from ros_bridge.shim.message import service_type
from ros_bridge.shim.rcl_interfaces.msg import (
    ListParametersResult,
    Parameter,
    ParameterDescriptor,
    ParameterValue,
    SetParametersResult,
)

GetParameters = service_type(
    "rcl_interfaces/srv/GetParameters",
    request=(("names", seq("string")),),
    response=(("values", seq(ParameterValue)),),
    hashes=(
        "RIHS01_bf9803d5c74cf989a5de3e0c2e99444599a627c7ff75f97b8c05b01003675cbc",
        "RIHS01_135a9e1c3d7cebef792f6687d7ddf99949b21a0bd9a320d863a9110a3f5cf4d6",
        "RIHS01_9fa773b46e39cc5d02db6224d8fd520bb9caeeffc2b27c96c1e59431baba9f2a",
    ),
)
GetParameterTypes = service_type(
    "rcl_interfaces/srv/GetParameterTypes",
    request=(("names", seq("string")),),
    response=(("types", seq("uint8")),),
    hashes=(
        "RIHS01_da199c878688b3e530bdfe3ca8f74cb9fa0c303101e980a9e8f260e25e1c80ca",
        "RIHS01_87d7ec5ef545d4daa289d500025d31fb2437bc8b8365ca367161c4dac4be33fd",
        "RIHS01_ac1335dce67c478e669434f6ac2fbff34fcd529580f272d3006785ba8b54e47f",
    ),
)
SetParameters = service_type(
    "rcl_interfaces/srv/SetParameters",
    request=(("parameters", seq(Parameter)),),
    response=(("results", seq(SetParametersResult)),),
    hashes=(
        "RIHS01_56eed9a67e169f9cb6c1f987bc88f868c14a8fc9f743a263bc734c154015d7e0",
        "RIHS01_130d46386b7e84ea9ecf60608a4d83cbe5e5cb7c6cc5b712b7a4e3a6c254e932",
        "RIHS01_7a0e8140a0b8d98308fa81a5403a766e610af29a239caf54b7553227906fc266",
    ),
)
SetParametersAtomically = service_type(
    "rcl_interfaces/srv/SetParametersAtomically",
    request=(("parameters", seq(Parameter)),),
    response=(("result", SetParametersResult),),
    hashes=(
        "RIHS01_0e192ef259c07fc3c07a13191d27002222e65e00ccec653ca05e856f79285fcd",
        "RIHS01_db0bd950ed5ed867a0e90b225e44dea382d762c0762ff3e0ee842190042a59e5",
        "RIHS01_31b1a38c5b0b9d893ee24da45f69638f4561c78461d82d52750f429b534502b8",
    ),
)
ListParameters = service_type(
    "rcl_interfaces/srv/ListParameters",
    request=(("prefixes", seq("string")), ("depth", "uint64")),
    response=(("result", ListParametersResult),),
    hashes=(
        "RIHS01_3e6062bfbb27bfb8730d4cef2558221f51a11646d78e7bb30a1e83afac3aad9d",
        "RIHS01_a1b0b5d6b967a5b8ac5bc8563c3ea678f349e312a6a4967227c5a96bc5ce38df",
        "RIHS01_31b937b82de3612426be79f231e386259f97e8dc843e3f2845288b4bfa296bdd",
    ),
    request_constants={"DEPTH_RECURSIVE": 0},
)
DescribeParameters = service_type(
    "rcl_interfaces/srv/DescribeParameters",
    request=(("names", seq("string")),),
    response=(("descriptors", seq(ParameterDescriptor)),),
    hashes=(
        "RIHS01_845b484d71eb0673dae682f2e3ba3c4851a65a3dcfb97bddd82c5b57e91e4cff",
        "RIHS01_05dd1c2bc87dec2627105c8070d6f9725c781a4f2ab852975bf105462b82b644",
        "RIHS01_ad6747319613c6131589e062e095b469a46cc764f7d0f12a001a49e6cd893995",
    ),
)
