// --distributed: every rank checks that all ranks run the same job (run_agreement.h).
#include "apps/mnist_train/run_agreement.h"

#include "core/error.h"
#include "kernels/functional.h"

namespace mnist {

using namespace ember;

namespace {
std::string shown(const RunField& f, int64_t v) {
  if (!f.names.empty() && v >= 0 && v < static_cast<int64_t>(f.names.size())) return f.names[static_cast<size_t>(v)];
  return std::to_string(v);
}
}  // namespace

void check_ranks_agree(dist::ProcessGroup& pg, const std::vector<RunField>& fields, Device device) {
  const int64_t k = static_cast<int64_t>(fields.size()), n = pg.size();
  Tensor mine = empty({k}, TensorOptions(DType::i64));
  for (int64_t i = 0; i < k; ++i) mine.data<int64_t>()[i] = fields[static_cast<size_t>(i)].value;
  Tensor all = empty({n * k}, TensorOptions(DType::i64).device(device));
  pg.all_gather(all, mine.to(device))->wait();
  const std::vector<int64_t> table = all.to(kCPU).to_vector<int64_t>();
  for (int64_t i = 0; i < k; ++i) {
    const RunField& f = fields[static_cast<size_t>(i)];
    const int64_t first = table[static_cast<size_t>(i)];
    for (int64_t r = 1; r < n; ++r) {
      const int64_t v = table[static_cast<size_t>(r * k + i)];
      if (v != first)
        EMBER_FAIL("--distributed: the ranks do not run the same job: rank ", r, " has ", f.name, " ", shown(f, v),
                   ", rank 0 has ", shown(f, first),
                   ". Every rank must be started with the same model, data, batch size and step counts "
                   "(ember_run starts one command for all)");
    }
  }
}

}  // namespace mnist
