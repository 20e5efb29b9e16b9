"""The kubelet's PodResources v1 API (``k8s.io/kubelet/pkg/apis/podresources/v1``), as gRPC stubs.

``api.proto`` is upstream's file, verbatim, at the version ``scripts/podresources_stubs.py`` pins
(Kubernetes v1.36.3); ``api_pb2.py`` and ``api_pb2_grpc.py`` are generated from it by grpcio-tools
(``make podresources-stubs``; a test checks they are current). Do not edit them by hand.
"""
