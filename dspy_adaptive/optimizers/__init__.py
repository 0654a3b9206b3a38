"""The optimizers: AdaptiveGEPA (dspy.GEPA's flat constructor over grouped settings), the dspy.GEPA
compatibility mapping, the OpenEndedOptimizer, and the one run assembly both use."""
