"""Lowering of the loss ops (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss) onto
primitives."""
