#!/bin/sh
# Two "nodes" on one machine: two network namespaces joined by a veth pair,
# `ddprun --nnodes 2` in each, and the gloo collectives across them.
#
#   two_node_gloo.sh DDPRUN PG_COLLECTIVES_MAIN
#
# Each node has its own network stack and address (10.231.N.1 and .2), so the
# ranks reach each other only over the veth link, as on two machines: the
# launchers' rendezvous, the workers' TCPStore and Gloo's connections all
# cross it. Exits 77 (CTest's skip code) where namespaces cannot be made:
# not root, no `ip`, or a sandbox without CAP_NET_ADMIN.
set -u
ddprun=$1
worker=$2
skip() { echo "SKIP: $*"; exit 77; }

command -v ip >/dev/null 2>&1 || skip "no ip(8) command"
[ "$(id -u)" = 0 ] || skip "network namespaces need root"

# Unique names, so parallel runs and leftovers of killed runs do not clash.
tag=$$
na=ddpA$tag nb=ddpB$tag va=vA$tag vb=vB$tag
subnet=10.231.$((tag % 250 + 1))
cleanup() { ip netns del "$na" 2>/dev/null; ip netns del "$nb" 2>/dev/null; }
trap cleanup EXIT INT TERM

ip netns add "$na" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed)"
ip netns add "$nb" || skip "cannot create a second network namespace"
ip link add "$va" type veth peer name "$vb" 2>/dev/null || skip "cannot create a veth pair"
ip link set "$va" netns "$na" && ip link set "$vb" netns "$nb" || skip "cannot move veth ends"
ip -n "$na" addr add "$subnet.1/24" dev "$va"
ip -n "$nb" addr add "$subnet.2/24" dev "$vb"
for n in "$na" "$nb"; do ip -n "$n" link set lo up; done
ip -n "$na" link set "$va" up
ip -n "$nb" link set "$vb" up

port=29611
common="--nnodes 2 --nproc-per-node 2 --master-addr $subnet.1 --master-port $port --rdzv-timeout 60"
filter=${DDP_NETNS_FILTER:-"--gtest_filter=Allreduce.*:Broadcast.*:Allgather.*:ReduceScatter.*:AllToAll.*:Barrier.*:SendRecv.RingWithTags"}
echo "node 0 in $na ($subnet.1), node 1 in $nb ($subnet.2)"
ip netns exec "$na" "$ddprun" $common --node-rank 0 "$worker" --backend gloo $filter > "/tmp/ddp_netns_$tag.0" 2>&1 &
pa=$!
ip netns exec "$nb" "$ddprun" $common --node-rank 1 "$worker" --backend gloo $filter > "/tmp/ddp_netns_$tag.1" 2>&1 &
pb=$!
wait $pa; sa=$?
wait $pb; sb=$?
echo "---- node 0 (exit $sa)"; cat "/tmp/ddp_netns_$tag.0"
echo "---- node 1 (exit $sb)"; cat "/tmp/ddp_netns_$tag.1"
rm -f "/tmp/ddp_netns_$tag.0" "/tmp/ddp_netns_$tag.1"
[ $sa -eq 0 ] && [ $sb -eq 0 ] || exit 1
exit 0
