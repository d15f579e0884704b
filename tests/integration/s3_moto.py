"""Fills a moto server for tests/integration/s3.sh (run with the test's venv).

Usage: s3_moto.py ENDPOINT SHARD_DIR

moto is started with INITIAL_NO_AUTH_ACTION_COUNT=3, so it checks every
request's signature after the first three, which make an IAM user, its access
key and a policy allowing everything. Then, signed with that key: a bucket
"wds-test" with the files of SHARD_DIR under "train/", 1,001 tiny objects
under "many/" (more than one ListObjectsV2 page of 1,000 keys) beside a
nested "many/sub/u.tar" and a "many/readme.txt", two copies of s-00.tar
under keys with dot segments ("dots/a/../x.tar", "dots/./y.tar"), and temporary credentials
of an assumed role from STS (moto checks their session token). Prints "KEY SECRET" and then "TKEY TSECRET TOKEN" (or "- - -" when
STS gives none), one line each.
"""

import concurrent.futures
import json
import os
import sys

import boto3


def main():
    endpoint, shard_dir = sys.argv[1], sys.argv[2]
    common = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    iam = boto3.client("iam", aws_access_key_id="x", aws_secret_access_key="x", **common)
    iam.create_user(UserName="wds")
    key = iam.create_access_key(UserName="wds")["AccessKey"]
    policy = {"Version": "2012-10-17",
              "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="wds", PolicyName="all", PolicyDocument=json.dumps(policy))
    creds = {"aws_access_key_id": key["AccessKeyId"],
             "aws_secret_access_key": key["SecretAccessKey"]}
    s3 = boto3.client("s3", **creds, **common)
    s3.create_bucket(Bucket="wds-test")
    for name in sorted(os.listdir(shard_dir)):
        s3.upload_file(os.path.join(shard_dir, name), "wds-test", "train/" + name)

    # Keys with "." and ".." segments: names, not paths (wds sends and
    # signs them as given; s3.sh checks which keys moto stored).
    shard = os.path.join(shard_dir, "s-00.tar")
    for k in ["dots/a/../x.tar", "dots/./y.tar"]:
        s3.upload_file(shard, "wds-test", k)
    dots = s3.list_objects_v2(Bucket="wds-test", Prefix="dots/")
    print("# dots keys:", [o["Key"] for o in dots.get("Contents", [])], file=sys.stderr)

    def put(k):
        s3.put_object(Bucket="wds-test", Key=k, Body=b"x")

    many = ["many/t-%04d.tar" % i for i in range(1001)]
    many += ["many/sub/u.tar", "many/readme.txt"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, many))
    print(key["AccessKeyId"], key["SecretAccessKey"])
    try:
        trust = {"Version": "2012-10-17",
                 "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                "Principal": {"AWS": "*"}}]}
        iam2 = boto3.client("iam", **creds, **common)
        arn = iam2.create_role(RoleName="reader",
                               AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        iam2.put_role_policy(RoleName="reader", PolicyName="all",
                             PolicyDocument=json.dumps(policy))
        sts = boto3.client("sts", **creds, **common)
        t = sts.assume_role(RoleArn=arn, RoleSessionName="wds")["Credentials"]
        print(t["AccessKeyId"], t["SecretAccessKey"], t["SessionToken"])
    except Exception as e:  # an older moto without STS: that check skips
        print("- - -")
        print("# no session token from STS:", e, file=sys.stderr)


if __name__ == "__main__":
    main()
