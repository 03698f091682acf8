#include "src/node/pod_resources.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "podresources/v1/api.grpc.pb.h"

namespace gs::node {

StatusOr<std::vector<ContainerDevices>> ListPodResources(const std::string& socket, const std::string& resource) {
  auto channel = grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
  auto stub = v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::ListPodResourcesRequest req;
  v1::ListPodResourcesResponse resp;
  grpc::Status s = stub->List(&ctx, req, &resp);
  if (!s.ok()) return Unavailable("pod-resources List on " + socket + ": " + s.error_message());
  std::vector<ContainerDevices> out;
  for (const auto& pod : resp.pod_resources())
    for (const auto& c : pod.containers())
      for (const auto& d : c.devices()) {
        if (!resource.empty() && d.resource_name() != resource) continue;
        out.push_back({pod.name(), pod.namespace_(), c.name(), d.resource_name(),
                       std::vector<std::string>(d.device_ids().begin(), d.device_ids().end())});
      }
  return out;
}

}  // namespace gs::node
