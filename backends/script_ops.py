"""What a script may do: an allow-list of the TorchScript ops tensor pre- and post-processing needs.

A script is code that clients send to the server. TorchScript can reach far more than tensors: ``torch.save``
(``aten::save``) and ``torch.from_file`` touch the file system, ``torch.distributed.rpc`` (``prim::rpc_*``) and the
``c10d`` ops the network, ``torch.ops.<anything>`` every operator any loaded library registered. So a compiled
script is checked before it is stored or run: every node of every function's *inlined* graph (called functions,
torch's own Python helpers such as ``torch.nn.functional.*`` included, every nested block and subgraph) must be
one of the ops below, or the script is refused with ``ERR script uses operations this server does not allow:
<ops>``. What is on the list: arithmetic, comparisons, math functions, reductions, shape/view/indexing ops,
cat/stack/split, creation and random tensors, dtype and device casts, linear algebra, the usual nn functions,
the builtins of ints, floats, strings, lists and dicts, the control-flow and constant nodes TorchScript emits
itself, and this server's ``redis::*`` / ``redisAI::*`` operators. ``--script-allow-ops`` adds more (a
deployment's own custom operators). docs/commands-scripts.md ("What a script may call") tells users.

Deliberately absent: ``aten::save``, ``aten::from_file`` (files), ``prim::rpc_*``, ``aten::wait``/``prim::fork``
(threads the run's watchdog cannot see), ``prim::Print``/``aten::_print`` (the server's stdout), storage tricks
(``set_``, ``as_strided``), global state (``manual_seed``, ``set_grad_enabled``), and every namespace but
``aten``, ``prim``, ``redis`` and ``redisAI``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def _ops(namespace: str, names: str) -> frozenset[str]:
    return frozenset(f"{namespace}::{name}" for name in names.split())


# Nodes TorchScript emits for the language itself: constants, containers, control flow, casts of optionals.
_LANGUAGE = _ops("prim", """
    Constant ListConstruct ListUnpack TupleConstruct TupleUnpack TupleIndex TupleSlice DictConstruct DictIndex
    If Loop Return Uninitialized unchecked_cast unchecked_unwrap_optional RaiseException isinstance
    NumToTensor StringIndex EnumName EnumValue ConstantChunk min max abs index rangelist tolist id
    dtype device layout requires_grad is_cuda is_cpu is_sparse is_sparse_csr is_quantized is_meta is_mkldnn
    is_nested is_mps is_xpu is_xla is_vulkan is_ipu is_maia is_mtia itemsize nbytes data name type shape
    Enter Exit CreateObject GetAttr SetAttr
""")

# Python builtins on ints, floats, bools, strings, lists and dicts (and the math module).
_BUILTINS = _ops("aten", """
    __getitem__ _set_item __contains__ __is__ __isnot__ __not__ __and__ __or__ __xor__ __lshift__ __rshift__
    __iand__ __ior__ __ixor__ __ilshift__ __irshift__ __range_length __derive_index __round_to_zero_floordiv
    Int Float Bool Complex IntImplicit FloatImplicit ComplexImplicit ScalarImplicit Size str format
    percentFormat len list dict append extend insert pop remove clear reverse sort sorted count index copy
    keys values items get setdefault update popitem Delete join split splitlines strip lstrip rstrip lower upper
    capitalize title swapcase startswith endswith find rfind rindex replace partition rpartition rsplit center
    ljust rjust zfill expandtabs isalnum isalpha isdecimal isdigit isidentifier islower isnumeric isprintable
    isspace istitle isupper chr ord hex oct bin hash divmod floordiv mathremainder factorial gcd is_scripting
    warn dim size numel item tensor scalar_tensor as_tensor element_size stride storage_offset is_contiguous
    is_floating_point is_complex is_signed is_nonzero is_same_size is_inference is_leaf is_conj is_neg
    get_device result_type can_cast promote_types broadcast_shapes _infer_size _unwrap_optional
    _list_to_tensor _tensor_to_list
""")

_ARITHMETIC_AND_MATH = _ops("aten", """
    add add_ sub sub_ subtract subtract_ rsub mul mul_ multiply multiply_ div div_ divide divide_ true_divide
    true_divide_ floor_divide floor_divide_ remainder remainder_ fmod fmod_ pow pow_ float_power float_power_
    neg neg_ negative negative_ positive abs abs_ absolute absolute_ sign sign_ sgn sgn_ signbit copysign
    copysign_ reciprocal reciprocal_ sqrt sqrt_ rsqrt rsqrt_ square square_ exp exp_ exp2 exp2_ expm1 expm1_
    log log_ log2 log2_ log10 log10_ log1p log1p_ logaddexp logaddexp2 logit logit_ xlogy xlogy_
    sin sin_ cos cos_ tan tan_ asin asin_ acos acos_ atan atan_ atan2 atan2_ sinh sinh_ cosh cosh_ tanh tanh_
    asinh asinh_ acosh acosh_ atanh atanh_ arcsin arcsin_ arccos arccos_ arctan arctan_ arctan2 arctan2_
    arcsinh arcsinh_ arccosh arccosh_ arctanh arctanh_ sinc sinc_ hypot hypot_ deg2rad deg2rad_ rad2deg rad2deg_
    degrees radians floor floor_ ceil ceil_ round round_ trunc trunc_ fix fix_ frac frac_ clamp clamp_
    clamp_min clamp_min_ clamp_max clamp_max_ clip clip_ lerp lerp_ addcmul addcmul_ addcdiv addcdiv_
    erf erf_ erfc erfc_ erfinv erfinv_ lgamma lgamma_ digamma digamma_ polygamma polygamma_ mvlgamma mvlgamma_
    i0 i0_ igamma igamma_ igammac igammac_ gcd_ lcm lcm_ ldexp ldexp_ frexp nextafter nextafter_ heaviside
    heaviside_ nan_to_num nan_to_num_ angle real imag conj conj_physical resolve_conj resolve_neg polar complex
    view_as_real view_as_complex bitwise_and bitwise_and_ bitwise_or bitwise_or_ bitwise_xor bitwise_xor_
    bitwise_not bitwise_not_ bitwise_left_shift bitwise_left_shift_ bitwise_right_shift bitwise_right_shift_
    logical_and logical_and_ logical_or logical_or_ logical_xor logical_xor_ logical_not logical_not_
    special_expit special_logit special_erf special_erfc special_erfinv special_exp2 special_expm1
    special_log1p special_round special_sinc special_xlogy special_xlog1py special_i0 special_i0e special_i1
    special_i1e special_ndtr special_ndtri special_log_ndtr special_gammaln special_digamma special_psi
    special_polygamma special_entr special_softmax special_log_softmax special_logsumexp
""")

_COMPARISONS = _ops("aten", """
    eq eq_ ne ne_ not_equal not_equal_ lt lt_ less less_ le le_ less_equal less_equal_ gt gt_ greater greater_
    ge ge_ greater_equal greater_equal_ equal allclose isclose isnan isinf isfinite isposinf isneginf isreal
    isin maximum minimum fmax fmin where
""")

_REDUCTIONS = _ops("aten", """
    sum nansum prod mean nanmean std std_mean var var_mean max min amax amin aminmax argmax argmin all any
    norm frobenius_norm nuclear_norm dist median nanmedian mode quantile nanquantile logsumexp cumsum cumsum_
    cumprod cumprod_ cummax cummin logcumsumexp count_nonzero bincount histc histogram kthvalue topk sort
    argsort msort unique_consecutive unique_dim unique_dim_consecutive _unique _unique2 diff trace
    cumulative_trapezoid trapezoid trapz cov corrcoef
""")

_SHAPES_AND_INDEXING = _ops("aten", """
    view view_as reshape reshape_as flatten unflatten ravel squeeze squeeze_ unsqueeze unsqueeze_ expand
    expand_as broadcast_to broadcast_tensors permute transpose transpose_ t t_ swapaxes swapaxes_ swapdims
    swapdims_ movedim moveaxis adjoint mT mH numpy_T matrix_H contiguous clone detach detach_ alias flip fliplr
    flipud roll rot90 repeat repeat_interleave tile narrow select slice index_select masked_select take
    take_along_dim gather scatter scatter_ scatter_add scatter_add_ scatter_reduce scatter_reduce_ index_add
    index_add_ index_copy index_copy_ index_fill index_fill_ index_put index_put_ index_reduce index_reduce_
    masked_fill masked_fill_ masked_scatter masked_scatter_ put put_ fill fill_ fill_diagonal_ zero_ tril tril_
    triu triu_ diag diagonal diag_embed diagflat diagonal_scatter select_scatter slice_scatter nonzero
    nonzero_static argwhere searchsorted bucketize unfold atleast_1d atleast_2d atleast_3d meshgrid
    cartesian_prod combinations block_diag one_hot pad constant_pad_nd reflection_pad1d reflection_pad2d
    reflection_pad3d replication_pad1d replication_pad2d replication_pad3d pixel_shuffle pixel_unshuffle
    channel_shuffle
""")

_JOIN_AND_SPLIT = _ops("aten", """
    cat concat concatenate stack hstack vstack dstack column_stack row_stack split split_with_sizes
    tensor_split chunk unbind hsplit vsplit dsplit
""")

_CREATION_AND_CASTS = _ops("aten", """
    zeros zeros_like ones ones_like full full_like empty empty_like empty_strided new_zeros new_ones new_full
    new_empty arange range linspace logspace eye tril_indices triu_indices rand rand_like randn randn_like
    randint randint_like randperm normal normal_ uniform_ bernoulli bernoulli_ multinomial poisson exponential_
    random_ to type_as cpu copy_ vander kaiser_window hann_window hamming_window blackman_window bartlett_window
""")

_LINEAR_ALGEBRA = _ops("aten", """
    matmul mm bmm mv dot vdot inner outer ger addmm addmm_ addbmm addbmm_ baddbmm baddbmm_ addmv addmv_ addr
    addr_ einsum tensordot kron cross linalg_cross det logdet slogdet inverse pinverse cholesky qr svd
    chain_matmul matrix_power matrix_exp linalg_det linalg_slogdet linalg_inv linalg_inv_ex linalg_pinv
    linalg_solve linalg_solve_ex linalg_lstsq linalg_qr linalg_svd linalg_svdvals linalg_eig linalg_eigvals
    linalg_eigh linalg_eigvalsh linalg_norm linalg_vector_norm linalg_matrix_norm linalg_cond
    linalg_matrix_rank linalg_matrix_power linalg_matrix_exp linalg_multi_dot linalg_cholesky
    linalg_cholesky_ex linalg_vecdot linalg_diagonal linalg_matmul linalg_vander cdist pdist cosine_similarity
    pairwise_distance fft_fft fft_ifft fft_fft2 fft_ifft2 fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2
    fft_irfft2 fft_rfftn fft_irfftn fft_hfft fft_ihfft fft_fftfreq fft_rfftfreq fft_fftshift fft_ifftshift
    stft istft
""")

_NEURAL_NETWORK = _ops("aten", """
    relu relu_ relu6 relu6_ leaky_relu leaky_relu_ elu elu_ selu selu_ celu celu_ gelu gelu_ silu silu_ mish
    mish_ sigmoid sigmoid_ hardsigmoid hardsigmoid_ hardswish hardswish_ hardtanh hardtanh_ hardshrink
    softshrink softplus threshold threshold_ prelu rrelu glu log_sigmoid logit softmax log_softmax _softmax
    _log_softmax dropout dropout_ alpha_dropout feature_dropout linear bilinear conv1d conv2d conv3d
    conv_transpose1d conv_transpose2d conv_transpose3d convolution _convolution avg_pool1d avg_pool2d
    avg_pool3d max_pool1d max_pool2d max_pool3d max_pool1d_with_indices max_pool2d_with_indices
    max_pool3d_with_indices adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d
    adaptive_max_pool2d adaptive_max_pool3d batch_norm instance_norm layer_norm group_norm rms_norm
    embedding embedding_bag __interpolate __upsample __upsample_nearest __upsample_bilinear upsample_nearest1d
    upsample_nearest2d upsample_nearest3d upsample_linear1d upsample_bilinear2d upsample_bicubic2d
    upsample_trilinear3d _upsample_nearest_exact1d _upsample_nearest_exact2d
    _upsample_nearest_exact3d _upsample_bilinear2d_aa _upsample_bicubic2d_aa _upsample_lanczos2d_aa
    grid_sampler affine_grid_generator
    scaled_dot_product_attention renorm
    mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy binary_cross_entropy_with_logits
    cross_entropy_loss nll_loss nll_loss_nd kl_div
""")

# This server's own operators (backends/script_backend.py): the store, and models.
_SERVER = frozenset({"redis::execute", "redis::asList", "redisAI::model_execute"})

ALLOWED_OPS: frozenset[str] = (_LANGUAGE | _BUILTINS | _ARITHMETIC_AND_MATH | _COMPARISONS | _REDUCTIONS
                               | _SHAPES_AND_INDEXING | _JOIN_AND_SPLIT | _CREATION_AND_CASTS | _LINEAR_ALGEBRA
                               | _NEURAL_NETWORK | _SERVER)


# Listed ops that some torch in pyproject's range (torch>=2.3,<=2.14.1) does not register. A name the installed
# torch lacks matches no node, so it allows nothing there and refuses nothing: the list serves every torch in the
# range as it is. Found by the schema strings in libtorch_cpu of torch 2.3.0, 2.4.1, 2.5.1, 2.6.0, 2.7.1, 2.8.0,
# 2.9.1, 2.10.0 and 2.11.0 (macOS wheels, read, not run) against this list: _upsample_lanczos2d_aa is in none of
# them (2.13.0 has it), broadcast_shapes is no registered op there (a Python function), rms_norm is new in 2.4.
# 2.12 and 2.14 were not checked. tests/unit/test_script_ops.py checks the rest of the list against the
# installed torch, so a typo still fails there.
NOT_IN_EVERY_TORCH: frozenset[str] = frozenset({
    "aten::_upsample_lanczos2d_aa", "aten::broadcast_shapes", "aten::rms_norm",
})


def _kinds(block: Any) -> Iterator[str]:
    """Every node kind in ``block``, with the nodes of its nested blocks and subgraph attributes."""
    for node in block.nodes():
        yield node.kind()
        for inner in node.blocks():
            yield from _kinds(inner)
        for attribute in node.attributeNames():
            kind = node.kindOf(attribute)
            if kind == "g":
                yield from _kinds(node.g(attribute))
            elif kind == "gs":
                for graph in node.gs(attribute):
                    yield from _kinds(graph)


def refused_ops(functions: Iterable[Any], extra: frozenset[str] = frozenset()) -> list[str]:
    """The ops of ``functions`` (compiled TorchScript functions) that are neither allowed nor in ``extra``,
    sorted. Each function's inlined graph is read, so what its calls reach is checked as well."""
    found: set[str] = set()
    for function in functions:
        found.update(_kinds(function.inlined_graph))
    return sorted(op for op in found if op not in ALLOWED_OPS and op not in extra)
