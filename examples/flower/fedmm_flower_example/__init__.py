# SPDX-License-Identifier: BSD-3-Clause
"""FedMM on Flower: a Gaussian mixture fitted by federated EM (FedMM with the EM surrogate)."""
