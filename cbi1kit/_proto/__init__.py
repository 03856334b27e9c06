"""Generated ``dynamo.kvrelay.v1`` protobuf and gRPC modules (see ``regenerate.py``).

``kvrelay_v1_pb2`` holds the messages; ``kvrelay_v1_pb2_grpc`` the ``KvEventRelay`` stub and
servicer (importing it needs ``grpcio``). The ``.proto`` is shipped alongside as the schema a
capture file records.
"""
