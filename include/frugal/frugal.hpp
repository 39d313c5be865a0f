#pragma once
// Frugal: efficient training over LibTorch. One include for the whole public API.

#include "frugal/config/config.hpp"
#include "frugal/config/standard_options.hpp"
#include "frugal/core/lr_schedule.hpp"
#include "frugal/core/metrics_log.hpp"
#include "frugal/core/model.hpp"
#include "frugal/core/policy.hpp"
#include "frugal/core/step_context.hpp"
#include "frugal/core/trainer.hpp"
#include "frugal/core/trainer_options.hpp"
#include "frugal/core/trainer_state.hpp"
#include "frugal/data/batch.hpp"
#include "frugal/data/data_loader.hpp"
#include "frugal/data/dataset.hpp"
#include "frugal/errors.hpp"
#include "frugal/log.hpp"
#include "frugal/policies/smoke_test.hpp"
