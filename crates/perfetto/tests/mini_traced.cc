// A minimal tracing service for the track-event tests: what `traced` does
// for producers and consumers (no data sources of its own), built from the
// Perfetto SDK's own amalgamated sources, the ones perfetto-sdk-sys
// vendors (scripts/perfetto-test.sh compiles it). It listens on the two
// UNIX sockets it is given until killed.
//
//     mini_traced PRODUCER_SOCKET CONSUMER_SOCKET
#include "perfetto_c.cc"

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: mini_traced PRODUCER_SOCKET CONSUMER_SOCKET\n");
    return 2;
  }
  perfetto::base::UnixTaskRunner task_runner;
  auto host = perfetto::ServiceIPCHost::CreateInstance(&task_runner);
  std::list<perfetto::ListenEndpoint> producers;
  producers.emplace_back(std::string(argv[1]));
  if (!host->Start(std::move(producers),
                   perfetto::ListenEndpoint(std::string(argv[2])))) {
    fprintf(stderr, "mini_traced: cannot listen on %s and %s\n", argv[1],
            argv[2]);
    return 1;
  }
  fprintf(stderr, "mini_traced: listening\n");
  task_runner.Run();
}
