"""NumPy's public callables that carry no derivative, and those not yet covered (see `inventory`)."""

# qualified name -> why no derivative flows through it
NONDIFFERENTIABLE = {
    "numpy.zeros": "An array built from a shape.",
}

# qualified name -> what is missing
NOT_YET = {}
