def normalize(tensors: List[Tensor], keys: List[str], args: List[str]):
    x = tensors[0]
    return (x - x.mean()) / float(args[0])

def remember(tensors: List[Tensor], keys: List[str], args: List[str]):
    redis.execute("SET", keys[0], args[0])
    return tensors[0]
