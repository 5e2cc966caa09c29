"""rcl_interfaces/srv: the six services every node offers for its parameters (class names as
rosidl generates them: `GetParameters.Request` is `GetParameters_Request`)."""

from __future__ import annotations

from ros_bridge.shim.fields import seq
from ros_bridge.shim.message import Message, ServiceType
from ros_bridge.shim.rcl_interfaces.msg import (
    ListParametersResult,
    Parameter,
    ParameterDescriptor,
    ParameterValue,
    SetParametersResult,
)


class GetParameters_Request(Message):
    _type_name_ = "rcl_interfaces/srv/GetParameters_Request"
    _type_hash_ = "RIHS01_135a9e1c3d7cebef792f6687d7ddf99949b21a0bd9a320d863a9110a3f5cf4d6"
    _fields_ = (("names", seq("string")),)


class GetParameters_Response(Message):
    _type_name_ = "rcl_interfaces/srv/GetParameters_Response"
    _type_hash_ = "RIHS01_9fa773b46e39cc5d02db6224d8fd520bb9caeeffc2b27c96c1e59431baba9f2a"
    _fields_ = (("values", seq(ParameterValue)),)


class GetParameters(ServiceType):
    _type_name_ = "rcl_interfaces/srv/GetParameters"
    _type_hash_ = "RIHS01_bf9803d5c74cf989a5de3e0c2e99444599a627c7ff75f97b8c05b01003675cbc"
    Request = GetParameters_Request
    Response = GetParameters_Response


class GetParameterTypes_Request(Message):
    _type_name_ = "rcl_interfaces/srv/GetParameterTypes_Request"
    _type_hash_ = "RIHS01_87d7ec5ef545d4daa289d500025d31fb2437bc8b8365ca367161c4dac4be33fd"
    _fields_ = (("names", seq("string")),)


class GetParameterTypes_Response(Message):
    _type_name_ = "rcl_interfaces/srv/GetParameterTypes_Response"
    _type_hash_ = "RIHS01_ac1335dce67c478e669434f6ac2fbff34fcd529580f272d3006785ba8b54e47f"
    _fields_ = (("types", seq("uint8")),)


class GetParameterTypes(ServiceType):
    _type_name_ = "rcl_interfaces/srv/GetParameterTypes"
    _type_hash_ = "RIHS01_da199c878688b3e530bdfe3ca8f74cb9fa0c303101e980a9e8f260e25e1c80ca"
    Request = GetParameterTypes_Request
    Response = GetParameterTypes_Response


class SetParameters_Request(Message):
    _type_name_ = "rcl_interfaces/srv/SetParameters_Request"
    _type_hash_ = "RIHS01_130d46386b7e84ea9ecf60608a4d83cbe5e5cb7c6cc5b712b7a4e3a6c254e932"
    _fields_ = (("parameters", seq(Parameter)),)


class SetParameters_Response(Message):
    _type_name_ = "rcl_interfaces/srv/SetParameters_Response"
    _type_hash_ = "RIHS01_7a0e8140a0b8d98308fa81a5403a766e610af29a239caf54b7553227906fc266"
    _fields_ = (("results", seq(SetParametersResult)),)


class SetParameters(ServiceType):
    _type_name_ = "rcl_interfaces/srv/SetParameters"
    _type_hash_ = "RIHS01_56eed9a67e169f9cb6c1f987bc88f868c14a8fc9f743a263bc734c154015d7e0"
    Request = SetParameters_Request
    Response = SetParameters_Response


class SetParametersAtomically_Request(Message):
    _type_name_ = "rcl_interfaces/srv/SetParametersAtomically_Request"
    _type_hash_ = "RIHS01_db0bd950ed5ed867a0e90b225e44dea382d762c0762ff3e0ee842190042a59e5"
    _fields_ = (("parameters", seq(Parameter)),)


class SetParametersAtomically_Response(Message):
    _type_name_ = "rcl_interfaces/srv/SetParametersAtomically_Response"
    _type_hash_ = "RIHS01_31b1a38c5b0b9d893ee24da45f69638f4561c78461d82d52750f429b534502b8"
    _fields_ = (("result", SetParametersResult),)


class SetParametersAtomically(ServiceType):
    _type_name_ = "rcl_interfaces/srv/SetParametersAtomically"
    _type_hash_ = "RIHS01_0e192ef259c07fc3c07a13191d27002222e65e00ccec653ca05e856f79285fcd"
    Request = SetParametersAtomically_Request
    Response = SetParametersAtomically_Response


class ListParameters_Request(Message):
    DEPTH_RECURSIVE = 0

    _type_name_ = "rcl_interfaces/srv/ListParameters_Request"
    _type_hash_ = "RIHS01_a1b0b5d6b967a5b8ac5bc8563c3ea678f349e312a6a4967227c5a96bc5ce38df"
    _fields_ = (("prefixes", seq("string")), ("depth", "uint64"))


class ListParameters_Response(Message):
    _type_name_ = "rcl_interfaces/srv/ListParameters_Response"
    _type_hash_ = "RIHS01_31b937b82de3612426be79f231e386259f97e8dc843e3f2845288b4bfa296bdd"
    _fields_ = (("result", ListParametersResult),)


class ListParameters(ServiceType):
    _type_name_ = "rcl_interfaces/srv/ListParameters"
    _type_hash_ = "RIHS01_3e6062bfbb27bfb8730d4cef2558221f51a11646d78e7bb30a1e83afac3aad9d"
    Request = ListParameters_Request
    Response = ListParameters_Response


class DescribeParameters_Request(Message):
    _type_name_ = "rcl_interfaces/srv/DescribeParameters_Request"
    _type_hash_ = "RIHS01_05dd1c2bc87dec2627105c8070d6f9725c781a4f2ab852975bf105462b82b644"
    _fields_ = (("names", seq("string")),)


class DescribeParameters_Response(Message):
    _type_name_ = "rcl_interfaces/srv/DescribeParameters_Response"
    _type_hash_ = "RIHS01_ad6747319613c6131589e062e095b469a46cc764f7d0f12a001a49e6cd893995"
    _fields_ = (("descriptors", seq(ParameterDescriptor)),)


class DescribeParameters(ServiceType):
    _type_name_ = "rcl_interfaces/srv/DescribeParameters"
    _type_hash_ = "RIHS01_845b484d71eb0673dae682f2e3ba3c4851a65a3dcfb97bddd82c5b57e91e4cff"
    Request = DescribeParameters_Request
    Response = DescribeParameters_Response
