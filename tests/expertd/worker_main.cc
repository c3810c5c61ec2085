// expertd_test_worker: a minimal worker process for the integration tests.
//   expertd_test_worker SOCKET fetch LAYER ID...   lease, print "ok ID CRC" / "err ID CODE MSG", release, exit
//   expertd_test_worker SOCKET hold LAYER ID...    lease, print "held N", then sleep until killed
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/format/crc32c.h"
#include "services/expertd_client/client.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s SOCKET fetch|hold LAYER ID...\n", argv[0]);
    return 2;
  }
  std::string mode = argv[2];
  int layer = std::atoi(argv[3]);
  std::vector<int> ids;
  for (int i = 4; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
  auto c = moe::expertd::ExpertdClient::Connect(argv[1], "test-worker");
  if (!c.ok()) {
    std::fprintf(stderr, "connect: %s\n", std::string(c.status().message()).c_str());
    return 1;
  }
  auto leases = (*c)->Acquire(layer, ids);
  int ok = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (leases[i].ok()) {
      ++ok;
      std::printf("ok %d %08x\n", ids[i], moe::crc32c::Extend(0, leases[i]->data, leases[i]->length));
    } else {
      std::printf("err %d %d %s\n", ids[i], int(leases[i].status().code()),
                  std::string(leases[i].status().message()).c_str());
    }
  }
  if (mode == "hold") {
    std::printf("held %d\n", ok);
    std::fflush(stdout);
    for (;;) pause();
  }
  for (auto& l : leases)
    if (l.ok()) (*c)->Release(*l);
  std::fflush(stdout);
  return 0;
}
