"""SciPy's public callables that carry no derivative, and those not yet covered (see `inventory`).

Namespaces: scipy.special, scipy.linalg, scipy.signal (convolve, correlate, fftconvolve,
lfilter) and scipy.spatial.distance (cdist, pdist, squareform).
"""


def _each(names, reason, prefix="scipy.special."):
    return {prefix + name: reason for name in names.split()}


# qualified name -> why no derivative flows through it
NONDIFFERENTIABLE = {
    **_each("ai_zeros bi_zeros bei_zeros beip_zeros ber_zeros berp_zeros kei_zeros keip_zeros ker_zeros kerp_zeros "
            "kelvin_zeros erf_zeros fresnel_zeros fresnelc_zeros fresnels_zeros jn_zeros jnjnp_zeros jnp_zeros "
            "jnyn_zeros yn_zeros ynp_zeros y0_zeros y1_zeros y1p_zeros",
            "Zeros of a special function, from an integer order and count: no array argument to differentiate."),
    **_each("bernoulli euler", "Bernoulli or Euler numbers of an integer: constants."),
    **_each("comb perm factorial factorial2 factorialk stirling2",
            "Counts of integer arguments (SciPy converts its input with np.asarray); for real arguments use "
            "gamma, gammaln, binom or poch, which are differentiable."),
    **_each("errstate geterr seterr", "Error-handling settings, not a function of array values."),
    **_each("roots_chebyc roots_chebys roots_chebyt roots_chebyu roots_hermite roots_hermitenorm roots_laguerre "
            "roots_legendre roots_sh_chebyt roots_sh_chebyu roots_sh_legendre c_roots s_roots t_roots u_roots h_roots "
            "he_roots l_roots p_roots ps_roots ts_roots us_roots",
            "Nodes and weights of a fixed quadrature rule, from an integer count: constants."),
    **_each("chebyc chebys chebyt chebyu hermite hermitenorm laguerre legendre sh_chebyt sh_chebyu sh_legendre",
            "A polynomial object built from an integer degree: constants (its eval_* ufunc is differentiable in x)."),
    **_each("bandwidth", "Integers: the widths of a band.", "scipy.linalg."),
    **_each("find_best_blas_type get_blas_funcs get_lapack_funcs", "BLAS/LAPACK routine lookup, not a function of "
            "array values.", "scipy.linalg."),
    **_each("dft hadamard helmert hilbert invhilbert pascal invpascal", "A constant matrix built from its size.",
            "scipy.linalg."),
    **_each("issymmetric ishermitian", "A boolean.", "scipy.linalg."),
}

# qualified name -> what is missing
NOT_YET = {
    **_each("roots_gegenbauer roots_genlaguerre roots_jacobi roots_sh_jacobi cg_roots la_roots j_roots js_roots",
            "The nodes and weights depend smoothly on the parameters (alpha, beta): no rule yet."),
    **_each("gegenbauer genlaguerre jacobi sh_jacobi",
            "The polynomial's coefficients depend on its parameters: no rule yet (the eval_* ufuncs are "
            "differentiable in x)."),
    **_each("assoc_legendre_p assoc_legendre_p_all legendre_p legendre_p_all sph_legendre_p sph_legendre_p_all "
            "lqmn lqn", "Legendre functions (Python-level, several outputs): no stand-in yet; lpmv is differentiable."),
    "scipy.special.chndtridf": "The inverse of chndtr in df: it needs chndtr's derivative in df, which has no "
                               "closed form; no rule yet.",
    **_each("ncfdtr ncfdtri ncfdtridfd ncfdtridfn ncfdtrinc nctdtr nctdtridf nctdtrinc nctdtrit",
            "Noncentral F and t distributions: no rule yet."),
    **_each("ellip_harm ellip_harm_2 ellip_normal", "Ellipsoidal harmonics: no rule yet."),
    **_each("elliprd elliprg elliprj", "Carlson's integrals R_D, R_G, R_J: their derivatives need further Carlson-type "
            "integrals; no rule yet."),
    **_each("h1vp h2vp hankel1 hankel1e hankel2 hankel2e kelvin modfresnelm modfresnelp sph_harm_y "
            "sph_harm_y_all wofz",
            "Complex values (results, or the Faddeeva function inside): the scipy.special rules are real-only so far."),
    **_each("lmbda pbdn_seq pbdv_seq pbvv_seq riccati_jn riccati_yn",
            "Scalar-only sequences of functions and their derivatives (Python-level): no stand-in yet."),
    **_each("mathieu_a mathieu_b mathieu_cem mathieu_even_coef mathieu_modcem1 mathieu_modcem2 mathieu_modsem1 "
            "mathieu_modsem2 mathieu_odd_coef mathieu_sem obl_ang1 obl_ang1_cv obl_cv obl_cv_seq obl_rad1 obl_rad1_cv "
            "obl_rad2 obl_rad2_cv pro_ang1 pro_ang1_cv pro_cv pro_cv_seq pro_rad1 pro_rad1_cv pro_rad2 pro_rad2_cv",
            "Mathieu and spheroidal wave functions: the derivatives in q (or c) have no closed form; no rule yet."),
    **_each("cdf2rdf eig eigvals schur rsf2csf qz ordqz",
            "Complex eigenvalues and eigenvectors, or Schur forms whose bases are not unique: no rule yet.",
            "scipy.linalg."),
    **_each("cossin hessenberg ldl rq qr_update qr_insert qr_delete",
            "A decomposition without a rule yet.", "scipy.linalg."),
    "scipy.linalg.expm_cond": "The condition number of expm: no rule yet.",
    "scipy.linalg.funm": "An arbitrary function of a matrix (Schur–Parlett): the block-triangular Fréchet derivative "
                         "meets its repeated eigenvalues; no rule yet.",
    "scipy.linalg.null_space": "A basis of the null space, defined only up to rotation where its dimension exceeds 1: "
                               "no rule yet.",
    "scipy.linalg.clarkson_woodruff_transform": "A random sketch S·A, linear in A for a fixed seed: no stand-in yet.",
}
