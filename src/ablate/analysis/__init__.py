"""the work behind fit, rank, extrapolate and plan: inputs on the chosen axis, the target, the call into fit/."""
