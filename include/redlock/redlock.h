// SPDX-License-Identifier: Apache-2.0
// redlock/redlock.h — umbrella header: the whole public API of the Redlock library.
#pragma once

#include "redlock/client.h"
#include "redlock/clock.h"
#include "redlock/errors.h"
#include "redlock/lease.h"
#include "redlock/mutex.h"
#include "redlock/options.h"
#include "redlock/result.h"
#include "redlock/status.h"
