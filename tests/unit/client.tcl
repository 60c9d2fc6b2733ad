# Connection and server commands: CLIENT ID/SETNAME/GETNAME/LIST/INFO/KILL,
# maxclients, idle timeout, QUIT, RESET, ECHO, PING, TIME, DEBUG SLEEP,
# SLOWLOG, COMMAND and SHUTDOWN.

# The value of field in a CLIENT LIST / CLIENT INFO line.
proc client_field {line field} {
    foreach kv [split [string trim $line] " "] {
        set eq [string first = $kv]
        if {[string range $kv 0 [expr {$eq - 1}]] eq $field} {
            return [string range $kv [expr {$eq + 1}] end]
        }
    }
    return {}
}

# The CLIENT LIST line of the client with this id, or "".
proc client_line {id} {
    foreach line [split [string trim [r client list]] "\n"] {
        if {[client_field $line id] eq $id} { return [string trim $line] }
    }
    return {}
}

start_server {tags {client}} {
    test {CLIENT ID is an integer, distinct per connection and increasing} {
        set id [r client id]
        assert {[string is wideinteger -strict $id]}
        set c [redis_client]
        set id2 [$c client id]
        $c close
        assert_morethan $id2 $id
        assert_equal $id [r client id]
    }

    test {CLIENT GETNAME of an unnamed connection is null} {
        set c [redis_client]
        assert_equal {} [$c client getname]
        assert_equal {$-1} [$c lastheader]
        $c close
    }

    test {CLIENT SETNAME and GETNAME} {
        assert_equal OK [r client setname my-name]
        assert_equal my-name [r client getname]
        r client setname other
        r client getname
    } {other}

    test {CLIENT SETNAME refuses spaces and newlines} {
        assert_error {ERR Client names cannot contain spaces*} {r client setname "a b"}
        assert_error {ERR Client names cannot contain spaces*} {r client setname "a\nb"}
        r client getname
    } {other}

    test {CLIENT SETNAME with an empty name removes it} {
        r client setname ""
        r client getname
    } {}

    test {CLIENT LIST lists every connection} {
        r client setname lister
        set c [redis_client]
        $c client setname second
        set list [string trim [r client list]]
        set lines [split $list "\n"]
        assert_equal [get_info_field r clients connected_clients] [llength $lines]
        set me [client_line [r client id]]
        assert_equal lister [client_field $me name]
        assert_match {127.0.0.1:*} [client_field $me addr]
        set other [client_line [$c client id]]
        assert_equal second [client_field $other name]
        $c close
    }

    test {CLIENT INFO describes the calling connection} {
        set line [r client info]
        assert_equal [r client id] [client_field $line id]
        assert_equal lister [client_field $line name]
        assert_match {127.0.0.1:*} [client_field $line addr]
        # Exactly one line.
        llength [split [string trim $line] "\n"]
    } {1}

    # Found by tests/helpers/redis_diff.py (seed 18): redis-server 7.0's answers.
    test {CLIENT KILL reads its pairs in order: a bad pair's error before a last option's missing value} {
        assert_error {ERR No such user 'nobody'} {r client kill user nobody extra}
        assert_error {ERR Unknown client type 'bogus'} {r client kill type bogus extra}
        assert_error {ERR client-id should be greater than 0} {r client kill id 0 extra}
        assert_error {ERR syntax error} {r client kill skipme maybe extra}
        assert_error {ERR syntax error} {r client kill id 999999 skipme}
        assert_equal PONG [r ping]
    }

    test {CLIENT KILL ID} {
        set c [redis_client]
        set id [$c client id]
        assert_equal 1 [r client kill id $id]
        assert_error {*I/O error*} {$c ping}
        $c close
        assert_equal {} [client_line $id]
        r client kill id 987654321
    } {0}

    test {CLIENT KILL ADDR} {
        set c [redis_client]
        set addr [client_field [$c client info] addr]
        assert_equal 1 [r client kill addr $addr]
        assert_error {*I/O error*} {$c ping}
        $c close
        r client kill addr 127.0.0.1:1
    } {0}

    test {CLIENT KILL with the legacy address form} {
        set c [redis_client]
        set addr [client_field [$c client info] addr]
        assert_equal OK [r client kill $addr]
        assert_error {*I/O error*} {$c ping}
        $c close
        assert_error {ERR No such client*} {r client kill 127.0.0.1:1}
    }

    test {CLIENT with an unknown subcommand} {
        assert_error {ERR unknown subcommand*} {r client no-such-subcommand}
    }

    test {maxclients refuses connections beyond the limit} {
        set old [lindex [r config get maxclients] 1]
        set n [get_info_field r clients connected_clients]
        r config set maxclients [expr {$n + 1}]
        set ok [redis_client]
        assert_equal PONG [$ok ping]
        set refused [redis_client]
        assert_error {ERR max number of clients reached*} {$refused ping}
        $refused close
        $ok close
        r config set maxclients $old
        # Room again once the limit is back.
        set c [redis_client]
        set p [$c ping]
        $c close
        set p
    } {PONG}

    test {QUIT replies OK and closes the connection} {
        set c [redis_client]
        assert_equal OK [$c quit]
        assert_error {*I/O error*} {$c ping}
        $c close
    }

    test {RESET restores the connection's defaults} {
        set c [redis_client]
        $c client setname before-reset
        $c hello 3
        assert_equal RESET [$c reset]
        assert_equal {} [$c client getname]
        # Back on RESP2.
        $c get nokey
        assert_equal {$-1} [$c lastheader]
        $c close
    }

    test {ECHO} {
        assert_equal hello [r echo hello]
        assert_equal "a\x00b" [r echo "a\x00b"]
        assert_error {ERR wrong number of arguments for 'echo' command*} {r echo}
        r echo ""
    } {}

    test {PING with and without an argument} {
        assert_equal PONG [r ping]
        assert_equal hi [r ping hi]
        assert_error {ERR wrong number of arguments for 'ping' command*} {r ping a b}
    }

    test {TIME} {
        set t [r time]
        assert_equal 2 [llength $t]
        lassign $t secs usecs
        assert_range $secs [expr {[clock seconds] - 2}] [expr {[clock seconds] + 2}]
        assert_range $usecs 0 999999
    }

    test {DEBUG SLEEP} {
        assert_equal OK [r debug sleep 0]
        set t0 [clock milliseconds]
        debug_sleep 0.2
        assert_morethan_equal [expr {[clock milliseconds] - $t0}] 190
    }

    test {DEBUG SLEEP blocks other clients meanwhile} {
        set rd [redis_deferring_client]
        set t0 [clock milliseconds]
        $rd debug sleep 0.3
        $rd flush
        after 50
        assert_equal PONG [r ping]
        assert_morethan_equal [expr {[clock milliseconds] - $t0}] 290
        assert_equal OK [$rd read]
        $rd close
    }

    test {SLOWLOG records commands slower than the threshold} {
        set old [lindex [r config get slowlog-log-slower-than] 1]
        r config set slowlog-log-slower-than 0
        assert_equal OK [r slowlog reset]
        assert_lessthan_equal [r slowlog len] 1
        r client setname slow-client
        r set slowkey slowvalue
        assert_morethan_equal [r slowlog len] 2
        set found 0
        foreach e [r slowlog get 100] {
            # id, unix time, microseconds, arguments, client address, name
            assert_equal 6 [llength $e]
            if {[lindex $e 3] eq {set slowkey slowvalue}} {
                set found 1
                assert_range [lindex $e 1] [expr {[clock seconds] - 5}] [expr {[clock seconds] + 5}]
                assert_morethan_equal [lindex $e 2] 0
                assert_match {127.0.0.1:*} [lindex $e 4]
                assert_equal slow-client [lindex $e 5]
            }
        }
        assert_equal 1 $found "SET found in SLOWLOG GET"
        assert_equal 1 [llength [r slowlog get 1]]
        r config set slowlog-log-slower-than $old
    }

    test {SLOWLOG RESET and a high threshold} {
        r config set slowlog-log-slower-than 10000000
        r slowlog reset
        r set a b
        r get a
        set n [r slowlog len]
        r config set slowlog-log-slower-than 10000
        set n
    } {0}

    test {COMMAND COUNT matches COMMAND and COMMAND LIST} {
        set n [r command count]
        assert_morethan $n 0
        assert_equal $n [llength [r command]]
        # COMMAND LIST may also name subcommands (config|get...).
        assert_morethan_equal [llength [r command list]] $n
    }

    test {COMMAND LIST has every Redis-compatible command} {
        set names [lmap c [r command list] {string tolower $c}]
        foreach c {ping echo hello auth select quit reset command info config client
                   time dbsize flushall flushdb shutdown slowlog debug set get getrange
                   strlen mget mset del unlink exists type scan keys expire pexpire
                   ttl pttl persist} {
            if {[lsearch -exact $names $c] < 0} { fail "COMMAND LIST lacks $c" }
        }
    }

    test {COMMAND INFO get and set: arity and key positions} {
        set info [r command info get set mset nosuchcommand]
        assert_equal 4 [llength $info]
        lassign [lindex $info 0] name arity flags first last step
        assert_equal [list get 2 1 1 1] [list $name $arity $first $last $step]
        lassign [lindex $info 1] name arity flags first last step
        assert_equal [list set -3 1 1 1] [list $name $arity $first $last $step]
        lassign [lindex $info 2] name arity flags first last step
        assert_equal [list mset -3 1 -1 2] [list $name $arity $first $last $step]
        lindex $info 3
    } {}

    test {COMMAND INFO and DOCS by full name: a subcommand, or nothing for one that is not} {
        set info [r command info get|key config|get config|nope config|get|x Config|GET]
        assert_equal 5 [llength $info]
        assert_equal {} [lindex $info 0]
        assert_equal config|get [lindex $info 1 0]
        assert_equal {} [lindex $info 2]
        assert_equal {} [lindex $info 3]
        assert_equal config|get [lindex $info 4 0]
        assert_equal {config|get} [dict keys [r command docs config|get get|key]]
    }

    test {COMMAND LIST names subcommands too; FILTERBY PATTERN matches full names, MODULE none loaded} {
        set names [r command list]
        assert {[lsearch -exact $names config|get] >= 0}
        assert {[lsearch -exact $names get] >= 0}
        assert_equal [lsort {config config|get config|set config|resetstat config|rewrite config|help}] \
            [lsort [r command list filterby pattern config*]]
        assert_equal {} [r command list filterby module nosuchmodule]
        assert_error {*syntax*} {r command list filterby nosuchfilter x}
    }

    test {COMMAND DOCS get} {
        set docs [r command docs get]
        assert {[dict exists $docs get]}
        set d [dict get $docs get]
        assert {[dict exists $d summary]}
        assert_not_equal {} [dict get $d summary]
    }

    # Redis 7's own answers (redis-server 7.0), as docs_shape reduces them.
    test {COMMAND DOCS get: its argument as Redis 7 describes it} {
        set d [dict get [r command docs get] get]
        docs_shape {*}[dict get $d arguments]
    } {{name key type key key_spec_index 0}}

    test {COMMAND DOCS set: tokens, oneof groups and optional flags as Redis 7} {
        set d [dict get [r command docs set] set]
        docs_shape {*}[dict get $d arguments]
    } {{name key type key key_spec_index 0} {name value type string} {name condition type oneof flags optional arguments {{name nx type pure-token token NX} {name xx type pure-token token XX}}} {name get type pure-token token GET flags optional} {name expiration type oneof flags optional arguments {{name seconds type integer token EX} {name milliseconds type integer token PX} {name unix-time-seconds type unix-time token EXAT} {name unix-time-milliseconds type unix-time token PXAT} {name keepttl type pure-token token KEEPTTL}}}}

    test {COMMAND DOCS mset: a repeated block} {
        set d [dict get [r command docs mset] mset]
        docs_shape {*}[dict get $d arguments]
    } {{name key_value type block flags multiple arguments {{name key type key key_spec_index 0} {name value type string}}}}

    test {COMMAND DOCS config: subcommands carry their own arguments} {
        set d [dict get [r command docs config] config]
        set set [dict get [dict get $d subcommands] config|set]
        docs_shape {*}[dict get $set arguments]
    } {{name parameter_value type block flags multiple arguments {{name parameter type string} {name value type string}}}}

    tags {mooncake} {
        test {COMMAND DOCS: every command that takes arguments lists them} {
            # Arity 1 (2 for a subcommand) takes none; a container's docs
            # are its subcommands'.
            set missing {}
            foreach info [r command] {
                lassign $info name arity
                set subs [lindex $info 9]
                set d [dict get [r command docs $name] $name]
                if {![llength $subs] && $arity != 1 && ![dict exists $d arguments] && $name ne "quit"} {
                    lappend missing $name
                }
                foreach sub $subs {
                    lassign $sub sname sarity
                    set sd [dict get [dict get $d subcommands] $sname]
                    if {$sarity != 2 && ![dict exists $sd arguments]} { lappend missing $sname }
                }
            }
            assert_equal {} $missing
        }

        test {COMMAND DOCS: store commands, a token that repeats (MOUNT ENDPOINT)} {
            set d [dict get [r command docs mount] mount]
            set args [docs_shape {*}[dict get $d arguments]]
            assert_equal {name uri type string token ENDPOINT flags {multiple multiple_token optional}} [lindex $args 2]
            set d [dict get [r command docs batch.put.start] batch.put.start]
            assert_equal {name key_size type block flags multiple arguments {{name key type key key_spec_index 0} {name size type integer}}} \
                [lindex [docs_shape {*}[dict get $d arguments]] 1]
        }
    }

    test {COMMAND GETKEYS} {
        assert_equal {a} [r command getkeys set a b]
        assert_equal {a} [r command getkeys get a]
        assert_equal {a b} [r command getkeys mset a 1 b 2]
        assert_equal {a b c} [r command getkeys del a b c]
        assert_equal {x y} [r command getkeys mget x y]
    }

    test {COMMAND GETKEYSANDFLAGS: each key with its access flags, as Redis 7} {
        assert_equal {{a {OW update}}} [r command getkeysandflags set a b]
        assert_equal {{a {RO access}}} [r command getkeysandflags get a]
        assert_equal {{a {RM delete}} {b {RM delete}}} [r command getkeysandflags del a b]
        assert_equal {{a {RW access delete}}} [r command getkeysandflags getdel a]
        assert_equal {{a {OW update}} {c {OW update}}} [r command getkeysandflags mset a b c d]
        assert_equal {{a {RW update}}} [r command getkeysandflags expire a 10]
        assert_error {*Invalid command*} {r command getkeysandflags nosuchcmd a}
    }

    # Found by the differential fuzzer (tests/helpers/redis_diff.py) against
    # redis-server 7.0: each answer below is redis-server's.
    test {COMMAND INFO of an unknown name is a null bulk under RESP2, as Redis} {
        r readraw 1
        set head [r command info get nosuchcommand]
        set items {}
        # get's entry holds no null: read until the first one, whichever type
        while {[set line [r read]] ni {$-1 *-1}} { lappend items $line }
        r readraw 0
        assert_equal {*2} $head
        assert_equal {$-1} $line
    }

    test {COMMAND GETKEYS: arity -4 and "no key arguments" before the count, as Redis 7.0} {
        assert_equal -4 [lindex [r command info command|getkeys] 0 1]
        assert_equal -4 [lindex [r command info command|getkeysandflags] 0 1]
        assert_error {*wrong number of arguments for 'command|getkeys' command*} {r command getkeys ping}
        assert_error {*wrong number of arguments for 'command|getkeysandflags' command*} {r command getkeysandflags get}
        assert_error {ERR The command has no key arguments} {r command getkeys echo a b}
        assert_error {ERR Invalid number of arguments specified for command} {r command getkeys get a b}
        assert_equal {a} [r command getkeys get a]
    }

    test {CLIENT LIST ID 0 or a negative id lists nothing, as Redis; not a number is refused} {
        assert_equal {} [r client list id 0]
        assert_equal {} [r client list id -1]
        set id [r client id]
        assert_match "id=$id *" [r client list id -5 $id]
        assert_error {ERR Invalid client ID} {r client list id abc}
    }

    test {MEMORY USAGE SAMPLES: not a number is that error, a negative count a syntax error} {
        r set mu v
        assert_error {ERR value is not an integer or out of range} {r memory usage mu samples abc}
        assert_error {ERR syntax error} {r memory usage mu samples -1}
        assert_error {ERR syntax error} {r memory usage mu samples}
        assert_morethan [r memory usage mu samples 0] 0
    }

    test {SLOWLOG GET with a count that is not a number: the range's message, as Redis} {
        assert_error {ERR count should be greater than or equal to -1} {r slowlog get abc}
        assert_error {ERR count should be greater than or equal to -1} {r slowlog get -2}
    }
}

start_server {tags {client slow}} {
    test {timeout closes idle clients} {
        r config set timeout 1
        set fd [raw_connect]
        set t0 [clock milliseconds]
        set closed [raw_wait_closed $fd 5000]
        set elapsed [expr {[clock milliseconds] - $t0}]
        catch {close $fd}
        reconnect
        r config set timeout 0
        assert_equal 1 $closed "idle client closed?"
        assert_range $elapsed 900 4000
    }

    test {timeout spares clients that keep talking} {
        r config set timeout 1
        set c [redis_client]
        for {set i 0} {$i < 12} {incr i} {
            assert_equal PONG [$c ping]
            after 200
        }
        $c close
        reconnect
        r config set timeout 0
    }

    test {timeout 0 never closes idle clients} {
        r config set timeout 0
        set fd [raw_connect]
        set closed [raw_wait_closed $fd 2000]
        close $fd
        set closed
    } {0}
}

start_server {tags {client}} {
    test {SHUTDOWN stops the server} {
        catch {r shutdown}
        assert_equal 1 [server_exited]
    }
}

start_server {tags {client mooncake}} {
    test {CLIENT NO-TOUCH: this connection's reads leave the LRU alone; NO-EVICT is accepted} {
        r set nt:k v
        after 1100
        set c [redis_client]
        assert_equal OK [$c client no-touch on]
        assert_match "*flags=*T*" [$c client info]
        assert_equal v [$c get nt:k]
        assert_morethan_equal [dict get [r object.info nt:k] last-access-ms] 1000
        assert_equal OK [$c client no-touch off]
        assert_equal v [$c get nt:k]
        assert_lessthan [dict get [r object.info nt:k] last-access-ms] 1000
        assert_equal OK [$c client no-evict on]
        assert_match "*flags=*e*" [$c client info]
        assert_error {*syntax*} {$c client no-touch maybe}
        $c close
    }
}

start_server {tags {client replication}} {
    test {WAIT and ROLE on a standalone server: no replicas, as Redis without any} {
        assert_equal {master 0 {}} [r role]
        r set wait-k v
        assert_equal 0 [r wait 0 0]
        # Nobody can acknowledge: WAIT n gives up at its timeout with 0.
        assert_equal 0 [r wait 1 100]
        assert_error {*timeout is negative*} {r wait 1 -5}
        assert_error {*wrong number of arguments*} {r wait 1}
        assert_equal PONG [r ping]
    }
}
