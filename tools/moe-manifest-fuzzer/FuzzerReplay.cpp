//===- FuzzerReplay.cpp - Run a fuzz target on files, without libFuzzer ---===//
//
// The main of a fuzz target built without MOE_FUZZ: each file named on the
// command line is one input, run as libFuzzer would run it. A run that
// returns prints "ok" with the file's name; a finding crashes, as in the
// fuzzer.
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream file(argv[i], std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    std::string input((std::istreambuf_iterator<char>(file)),
                      std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(input.data()),
                           input.size());
    std::printf("ok %s\n", argv[i]);
  }
  return 0;
}
