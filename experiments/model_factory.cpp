#include "experiments/model_factory.h"

#include <chrono>

#include "common/error.h"
#include "worker/mlp.h"
#include "worker/synthetic_model.h"

namespace gradsync {

std::unique_ptr<Model> make_model(const Config& config, const std::vector<int>& widths,
                                  int max_batch) {
  if (config.device != "cpu") {
    throw ConfigError(config.name, "device",
                      "'" + config.device + "' is not available in this build (cpu only)");
  }
  std::unique_ptr<Model> model;
  if (config.model.kind == "synthetic") {
    const auto compute = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double, std::milli>(config.model.compute_ms));
    model = std::make_unique<SyntheticModel>(config.model.parameters, config.model.layers,
                                             compute);
  } else if (config.model.kind == "mlp") {
    model = std::make_unique<Mlp>(widths, max_batch);
  } else {
    throw ConfigError(config.name, "model.kind", "unknown model '" + config.model.kind + "'");
  }
  model->init_params(config.train.seed);
  return model;
}

std::int64_t model_parameters(const Config& config, const std::vector<int>& widths) {
  if (config.model.kind == "synthetic") return config.model.parameters;
  std::int64_t count = 0;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    count += static_cast<std::int64_t>(widths[l]) * widths[l + 1] + widths[l + 1];
  }
  return count;
}

}  // namespace gradsync
