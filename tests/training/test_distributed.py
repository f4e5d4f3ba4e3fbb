from xeoncluster.node.startup.distributed import DistInfo, export_env, from_env, missing_master_addr


def test_no_variables_means_single_process() -> None:
    assert from_env({}) == DistInfo(0, 1, 0, 1)
    assert not from_env({}).is_distributed


def test_intel_mpi_and_mpich_pmi_variables() -> None:
    env = {"PMI_RANK": "3", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    info = from_env(env)
    assert info == DistInfo(rank=3, world_size=8, local_rank=1, local_world_size=2)
    assert info.num_nodes == 4


def test_open_mpi_variables() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "6",
        "OMPI_COMM_WORLD_LOCAL_RANK": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
    }
    assert from_env(env) == DistInfo(5, 6, 2, 3)


def test_plain_torchrun_variables() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert from_env(env) == DistInfo(1, 4, 1, 2)


def test_mpi_wins_over_stale_plain_variables() -> None:
    env = {"PMI_RANK": "1", "PMI_SIZE": "2", "RANK": "0", "WORLD_SIZE": "1"}
    assert from_env(env).rank == 1


def test_missing_local_variables_assume_one_node() -> None:
    assert from_env({"PMI_RANK": "1", "PMI_SIZE": "2"}) == DistInfo(1, 2, 1, 2)


def test_export_sets_torch_variables_and_default_port() -> None:
    env: dict[str, str] = {"MASTER_ADDR": "10.0.0.5"}
    export_env(DistInfo(2, 4, 0, 2), env)
    assert env == {
        "MASTER_ADDR": "10.0.0.5",
        "RANK": "2",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_PORT": "29500",
    }


def test_export_keeps_a_given_port() -> None:
    env = {"MASTER_PORT": "1234"}
    export_env(DistInfo(0, 2, 0, 2), env)
    assert env["MASTER_PORT"] == "1234"


def test_master_addr_is_required_only_for_several_ranks() -> None:
    assert missing_master_addr(DistInfo(0, 2, 0, 2), {})
    assert not missing_master_addr(DistInfo(0, 2, 0, 2), {"MASTER_ADDR": "10.0.0.1"})
    assert not missing_master_addr(DistInfo(), {})
