# The commands Redis tools send that a store of one database whose
# persistence is the append-only log answers in its own way: SWAPDB,
# LASTSAVE, SAVE and BGSAVE (docs/PROTOCOL.md, Server).

start_server {tags {tooling}} {
    test {SWAPDB 0 0 is OK; another index is out of range, a non-number named as Redis names it} {
        r set swapkey v
        assert_equal OK [r swapdb 0 0]
        assert_equal v [r get swapkey]
        assert_error {ERR DB index is out of range} {r swapdb 0 1}
        assert_error {ERR DB index is out of range} {r swapdb -1 0}
        assert_error {ERR invalid first DB index} {r swapdb x 0}
        assert_error {ERR invalid second DB index} {r swapdb 0 x}
        assert_equal v [r get swapkey]
    }

    test {LASTSAVE answers INFO persistence's rdb_last_save_time} {
        set info [r info persistence]
        regexp {rdb_last_save_time:(\d+)} $info -> t
        assert_equal $t [r lastsave]
    }

    test {SAVE and BGSAVE are refused, naming the append-only file; nothing changes} {
        r set savekey v
        set n [r dbsize]
        assert_error {ERR SAVE is not supported: there are no RDB snapshots; the append-only file*} {r save}
        assert_error {ERR BGSAVE is not supported: there are no RDB snapshots*BGREWRITEAOF*} {r bgsave}
        assert_error {ERR BGSAVE is not supported*} {r bgsave schedule}
        assert_error {ERR syntax error} {r bgsave now}
        assert_equal $n [r dbsize]
        assert_match {*rdb_bgsave_in_progress:0*} [r info persistence]
    }

    test {COMMAND INFO of SWAPDB, LASTSAVE, SAVE, BGSAVE: Redis's arity, flags and categories} {
        set infos [r command info swapdb lastsave save bgsave]
        assert_equal {swapdb 3 {write fast} 0 0 0} [lrange [lindex $infos 0] 0 5]
        assert_equal {@keyspace @write @fast @dangerous} [lindex $infos 0 6]
        assert_equal {lastsave 1 {loading stale fast} 0 0 0} [lrange [lindex $infos 1] 0 5]
        assert_equal {@admin @fast @dangerous} [lindex $infos 1 6]
        assert_equal {@admin @slow @dangerous} [lindex $infos 2 6]
        assert_equal {bgsave -1} [lrange [lindex $infos 3] 0 1]
        assert_equal {@admin @slow @dangerous} [lindex $infos 3 6]
    }
}
