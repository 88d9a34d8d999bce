"""SciPy's public callables that carry no derivative, and those not yet covered (see `inventory`)."""

# qualified name -> why no derivative flows through it
NONDIFFERENTIABLE = {}

# qualified name -> what is missing
NOT_YET = {}
